//! Moving runs between hosts: `sandglass runs pack` writes runs and studies into one archive
//! (tar, gzip-compressed), and `sandglass runs import ARCHIVE` unpacks it into the runs
//! directory. Each run travels with its manifest, whose checksums cover every file: a run is
//! verified before it is packed and again, in a private directory, before it is moved into
//! the runs directory, so a damaged or altered archive adds nothing.
//!
//! Only directories and regular files are unpacked, each inside the private directory (an
//! entry naming an absolute path, `..`, a link or a device is refused), and a run whose id is
//! already in the runs directory is refused rather than overwritten.

use super::{ReadError, RunReader};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why packing or unpacking failed.
#[derive(Debug, Error)]
pub enum PackError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Damaged(#[from] ReadError),
    #[error("{path}: not a run or study directory (no manifest.json or study.json)")]
    NotARun { path: PathBuf },
    #[error("{archive}: entry {entry} {why}; nothing was imported")]
    Entry {
        archive: PathBuf,
        entry: String,
        why: &'static str,
    },
    #[error("{archive}: holds no run or study; nothing was imported")]
    Empty { archive: PathBuf },
    #[error(
        "{id} is already in {base}; remove it first (sandglass runs rm {id}) to import this copy"
    )]
    Exists { id: String, base: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Verifies every file of the run or study at `dir` against its manifest(s).
pub fn verify_tree(dir: &Path) -> Result<(), PackError> {
    if dir.join("manifest.json").is_file() {
        RunReader::open_kept(dir)?.verify()?;
        return Ok(());
    }
    if !dir.join("study.json").is_file() {
        return Err(PackError::NotARun {
            path: dir.to_path_buf(),
        });
    }
    let rd = std::fs::read_dir(dir).map_err(io(dir))?;
    for e in rd.flatten() {
        let p = e.path();
        if p.join("manifest.json").is_file() {
            RunReader::open_kept(&p)?.verify()?;
        }
    }
    Ok(())
}

/// Writes the runs and studies at `dirs` (each verified first) into the gzip-compressed tar
/// archive `out`, each under its directory's name. Returns the bytes written.
pub fn pack(dirs: &[PathBuf], out: &Path) -> Result<u64, PackError> {
    for d in dirs {
        verify_tree(d)?;
    }
    let tmp = out.with_extension("partial");
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    b.follow_symlinks(false);
    let written = (|| {
        for d in dirs {
            let name = d
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| d.clone());
            b.append_dir_all(&name, d)?;
        }
        let gz = b.into_inner()?;
        let mut f = gz.finish()?;
        f.flush()?;
        f.sync_all()?;
        Ok::<_, std::io::Error>(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(out)(e));
    }
    std::fs::rename(&tmp, out).map_err(io(out))?;
    Ok(std::fs::metadata(out).map(|m| m.len()).unwrap_or(0))
}

/// True when `path` starts with gzip's magic bytes.
fn is_gzip(path: &Path) -> Result<bool, PackError> {
    let mut magic = [0u8; 2];
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let n = f.read(&mut magic).map_err(io(path))?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// Unpacks the archive at `archive` (gzip-compressed or plain tar) into `base`: every entry
/// into a private directory of `base` first, each run and study in it verified, then each
/// moved to `base/NAME`. Returns the directories added, in the archive's order. On any error
/// nothing is added and the private directory is removed.
pub fn unpack(archive: &Path, base: &Path) -> Result<Vec<PathBuf>, PackError> {
    std::fs::create_dir_all(base).map_err(io(base))?;
    let work = tempdir_in(base)?;
    let result = unpack_into(archive, base, &work);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn tempdir_in(base: &Path) -> Result<PathBuf, PackError> {
    for attempt in 0..100u32 {
        let p = base.join(format!(".import-{}-{attempt}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&p)(e)),
        }
    }
    Err(io(base)(std::io::Error::other(
        "no private directory could be made",
    )))
}

fn unpack_into(archive: &Path, base: &Path, work: &Path) -> Result<Vec<PathBuf>, PackError> {
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    let reader: Box<dyn Read> = if is_gzip(archive)? {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut a = tar::Archive::new(reader);
    a.set_preserve_permissions(false);
    a.set_unpack_xattrs(false);
    let bad = |entry: String, why| PackError::Entry {
        archive: archive.to_path_buf(),
        entry,
        why,
    };
    let mut tops: Vec<String> = Vec::new();
    for e in a.entries().map_err(io(archive))? {
        let mut e = e.map_err(io(archive))?;
        let path = e.path().map_err(io(archive))?.into_owned();
        let name = path.display().to_string();
        let kind = e.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(bad(name, "is not a file or a directory"));
        }
        let mut parts = path.components();
        let top = match parts.next() {
            Some(std::path::Component::Normal(t)) => t.to_string_lossy().into_owned(),
            _ => return Err(bad(name, "is not a relative path inside the archive")),
        };
        if path
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(bad(name, "leaves its directory"));
        }
        if top.starts_with('.') {
            return Err(bad(name, "is a hidden directory"));
        }
        if !tops.contains(&top) {
            tops.push(top);
        }
        if !e.unpack_in(work).map_err(io(archive))? {
            return Err(bad(name, "leaves its directory"));
        }
    }
    if tops.is_empty() {
        return Err(PackError::Empty {
            archive: archive.to_path_buf(),
        });
    }
    for t in &tops {
        verify_tree(&work.join(t))?;
        if base.join(t).exists() {
            return Err(PackError::Exists {
                id: t.clone(),
                base: base.to_path_buf(),
            });
        }
    }
    let mut added = Vec::new();
    for t in &tops {
        let to = base.join(t);
        std::fs::rename(work.join(t), &to).map_err(io(&to))?;
        added.push(to);
    }
    Ok(added)
}
