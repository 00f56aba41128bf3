//! Files a run appends to as it goes (the sampler's rows, the per-second interval log), with
//! their SHA-256 computed as they are written.
//!
//! What was appended and flushed survives the end of the process however it ends; the next
//! start lists such files in the manifest of a run it marks incomplete, with their checksums
//! computed then.

use super::{sha256_hex_of, FileEntry, StoreError};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file of a run, written from start to end.
pub struct AppendFile {
    path: PathBuf,
    name: String,
    file: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    bytes: u64,
    format: &'static str,
    description: &'static str,
}

impl AppendFile {
    /// Creates `name` in `dir` (it must not exist).
    pub fn create(
        dir: &Path,
        name: &str,
        format: &'static str,
        description: &'static str,
    ) -> Result<AppendFile, StoreError> {
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| StoreError::Write {
                path: path.clone(),
                source,
            })?;
        Ok(AppendFile {
            path,
            name: name.to_string(),
            file: std::io::BufWriter::with_capacity(1 << 16, file),
            hasher: Sha256::new(),
            bytes: 0,
            format,
            description,
        })
    }

    fn err(&self, source: std::io::Error) -> StoreError {
        StoreError::Write {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends `data` (buffered).
    pub fn append(&mut self, data: &[u8]) -> Result<(), StoreError> {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
        self.file.write_all(data).map_err(|e| self.err(e))
    }

    /// Hands what is buffered to the kernel, where it survives the process.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.file.flush().map_err(|e| self.err(e))
    }

    /// Flushes, syncs to disk and returns the file's manifest entry.
    pub fn finish(mut self) -> Result<FileEntry, StoreError> {
        self.flush()?;
        self.file.get_ref().sync_all().map_err(|e| self.err(e))?;
        Ok(FileEntry {
            name: self.name,
            bytes: self.bytes,
            sha256: sha256_hex_of(self.hasher),
            format: self.format.to_string(),
            description: self.description.to_string(),
        })
    }
}

/// Writes through [`AppendFile::append`]; for writers that take `io::Write`.
impl Write for AppendFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.append(buf)
            .map(|()| buf.len())
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_that_of_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut f = AppendFile::create(tmp.path(), "a.csv", "t/1", "test").expect("create");
        f.append(b"x,y\n").expect("append");
        writeln!(f, "{},{}", 1, 2).expect("write");
        let e = f.finish().expect("finish");
        let data = std::fs::read(tmp.path().join("a.csv")).expect("read");
        assert_eq!(data, b"x,y\n1,2\n");
        assert_eq!(e.bytes, 8);
        assert_eq!(e.sha256, crate::store::sha256_hex(&data));
        assert!(AppendFile::create(tmp.path(), "a.csv", "t/1", "test").is_err());
    }
}
