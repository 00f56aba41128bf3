//! Names from files and from the system, made safe to print.
//!
//! A task or study name comes from a file someone else may have written, and a thread's name
//! (`comm`, from `/proc` or tracefs) is whatever that thread set with `prctl(PR_SET_NAME)`. Printed
//! raw, such a name can carry terminal control sequences (`ESC [ 31 m` recolours the screen, other
//! sequences move the cursor or set the window title) or Unicode bidirectional overrides (U+202E
//! shows the rest of the line backwards), so that a report says something other than what the
//! run recorded. [`Printable`] shows every such character as an escape (`\u{1b}`, `\u{202e}`),
//! the rest as it is; [`is_unsafe`] tells which characters those are: the C0 controls, DEL,
//! the C1 controls, and the bidirectional embeddings, overrides and isolates (U+202A to U+202E,
//! U+2066 to U+2069; Unicode Standard Annex #9, and CVE-2021-42574, "Trojan Source").

use std::fmt;

/// True for a character that must not reach a terminal or a document as it is: a C0 control
/// (U+0000 to U+001F), DEL, a C1 control (U+0080 to U+009F), or a bidirectional embedding,
/// override or isolate.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// True when `s` has a character [`is_unsafe`] rejects.
pub fn has_unsafe(s: &str) -> bool {
    s.chars().any(is_unsafe)
}

/// A name shown with every unsafe character escaped as `\u{HEX}`, newlines and tabs included
/// (a name is one line).
#[derive(Clone, Copy, Debug)]
pub struct Printable<'a>(pub &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, false)
    }
}

/// A text of several lines (a message, a report) shown with every unsafe character escaped but
/// its newlines and tabs.
#[derive(Clone, Copy, Debug)]
pub struct PrintableText<'a>(pub &'a str);

impl fmt::Display for PrintableText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, true)
    }
}

fn write_escaped(f: &mut fmt::Formatter<'_>, s: &str, lines: bool) -> fmt::Result {
    let mut rest = s;
    while let Some((i, c)) = rest
        .char_indices()
        .find(|&(_, c)| is_unsafe(c) && !(lines && matches!(c, '\n' | '\t')))
    {
        f.write_str(&rest[..i])?;
        write!(f, "\\u{{{:x}}}", c as u32)?;
        rest = &rest[i + c.len_utf8()..];
    }
    f.write_str(rest)
}

/// `s` as [`Printable`] shows it, borrowed when nothing needed escaping.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if has_unsafe(s) {
        std::borrow::Cow::Owned(Printable(s).to_string())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// A writer that passes text on with every unsafe character escaped but newlines and tabs, as
/// [`PrintableText`] shows it: for a whole report written to a terminal or a file, whatever
/// names it holds. A character split across two writes is escaped whole; a byte that is not
/// UTF-8 is shown as `\x{HEX}`.
pub struct EscapingWriter<W: std::io::Write> {
    inner: W,
    /// The start of a character whose other bytes have not come yet.
    pending: Vec<u8>,
}

impl<W: std::io::Write> EscapingWriter<W> {
    pub fn new(inner: W) -> EscapingWriter<W> {
        EscapingWriter {
            inner,
            pending: Vec::new(),
        }
    }

    fn pass(&mut self, mut bytes: &[u8], end: bool) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let (valid, bad) = match std::str::from_utf8(bytes) {
                Ok(s) => (s, None),
                Err(e) => {
                    let s = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
                    (s, Some(e.error_len()))
                }
            };
            if has_unsafe(valid) {
                write!(self.inner, "{}", PrintableText(valid))?;
            } else {
                self.inner.write_all(valid.as_bytes())?;
            }
            bytes = &bytes[valid.len()..];
            match bad {
                None => break,
                // A character cut at the end of this write: kept for the next one.
                Some(None) if !end => {
                    self.pending.extend_from_slice(bytes);
                    break;
                }
                Some(n) => {
                    let n = n.unwrap_or(bytes.len());
                    for b in &bytes[..n] {
                        write!(self.inner, "\\x{{{b:x}}}")?;
                    }
                    bytes = &bytes[n..];
                }
            }
        }
        Ok(())
    }
}

impl<W: std::io::Write> std::io::Write for EscapingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        self.pass(&bytes, false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pass(&pending, true)?;
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_escapes_across_writes_and_keeps_lines() {
        use std::io::Write;
        let mut out = Vec::new();
        {
            let mut w = EscapingWriter::new(&mut out);
            let text = "task \u{1b}[31m\n\tµ \u{202e}x".as_bytes();
            // Split inside the three-byte U+202E.
            let (a, b) = text.split_at(16);
            w.write_all(a).expect("write");
            w.write_all(b).expect("write");
            w.write_all(b"\xff|").expect("write");
            w.flush().expect("flush");
        }
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "task \\u{1b}[31m\n\tµ \\u{202e}x\\x{ff}|"
        );
    }

    #[test]
    fn controls_and_bidi_overrides_are_escaped_and_the_rest_kept() {
        assert_eq!(Printable("kworker/0:1").to_string(), "kworker/0:1");
        assert_eq!(Printable("µs café 音").to_string(), "µs café 音");
        assert_eq!(Printable("\u{1b}[31mred").to_string(), "\\u{1b}[31mred");
        assert_eq!(Printable("a\u{202e}b").to_string(), "a\\u{202e}b");
        assert_eq!(
            Printable("\u{2066}x\u{2069}").to_string(),
            "\\u{2066}x\\u{2069}"
        );
        assert_eq!(Printable("del\u{7f}").to_string(), "del\\u{7f}");
        assert_eq!(Printable("c1\u{9b}2J").to_string(), "c1\\u{9b}2J");
        assert_eq!(
            Printable("two\nlines\t").to_string(),
            "two\\u{a}lines\\u{9}"
        );
        assert_eq!(
            PrintableText("two\nlines\t\u{1b}]0;title\u{7}").to_string(),
            "two\nlines\t\\u{1b}]0;title\\u{7}"
        );
        assert!(matches!(
            escape("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
        assert_eq!(escape("\u{0}"), "\\u{0}");
        // The characters next to the ranges are kept: U+2029 and U+206A are not overrides.
        assert!(!has_unsafe("\u{2029}\u{206a}\u{a0}"));
        for c in [
            '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{202a}', '\u{2069}',
        ] {
            assert!(is_unsafe(c), "{c:?}");
        }
    }
}
