//! Lines read with a cap on their length.

use std::io::{self, BufRead};

/// A line read by [`read_line_capped`]: its first bytes, up to the cap, without the newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CappedLine {
    /// The bytes kept: all of the line, or its first `cap` bytes.
    pub bytes: Vec<u8>,
    /// Whether the line was longer than the cap (the rest was read and dropped).
    pub over_cap: bool,
}

impl CappedLine {
    /// The bytes as text, with every byte that is not UTF-8 replaced.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Reads the next line of `reader` (up to a newline or the end), at most `cap_bytes` of it: a
/// longer line is returned as soon as it passes the cap, with its first `cap_bytes` bytes and
/// the rest left unread ([`skip_line`] drops it). A line with no newline for ever costs the
/// cap, never more. `None` at the end.
pub fn read_line_capped<R: BufRead>(
    reader: &mut R,
    cap_bytes: usize,
) -> io::Result<Option<CappedLine>> {
    let mut line = CappedLine {
        bytes: Vec::new(),
        over_cap: false,
    };
    let mut read_any = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(read_any.then_some(line));
        }
        read_any = true;
        let newline = available.iter().position(|&byte| byte == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        let room = cap_bytes.saturating_sub(line.bytes.len());
        if chunk.len() > room {
            line.bytes.extend_from_slice(&chunk[..room]);
            line.over_cap = true;
            reader.consume(room);
            return Ok(Some(line));
        }
        line.bytes.extend_from_slice(chunk);
        let used = newline.map_or(available.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(line));
        }
    }
}

/// Reads and drops the rest of the current line of `reader`, up to its newline or the end.
pub fn skip_line<R: BufRead>(reader: &mut R) -> io::Result<()> {
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|&byte| byte == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let all = available.len();
                reader.consume(all);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_at_the_cap_and_the_next_read_whole() {
        let text = b"abcdefgh\nxy\n\ntail";
        let mut reader = &text[..];
        let line = |bytes: &[u8], over_cap| {
            Some(CappedLine {
                bytes: bytes.to_vec(),
                over_cap,
            })
        };
        assert_eq!(
            read_line_capped(&mut reader, 4).unwrap(),
            line(b"abcd", true)
        );
        skip_line(&mut reader).unwrap();
        assert_eq!(
            read_line_capped(&mut reader, 4).unwrap(),
            line(b"xy", false)
        );
        assert_eq!(read_line_capped(&mut reader, 4).unwrap(), line(b"", false));
        assert_eq!(
            read_line_capped(&mut reader, 4).unwrap(),
            line(b"tail", false)
        );
        assert_eq!(read_line_capped(&mut reader, 4).unwrap(), None);
    }

    #[test]
    fn bytes_that_are_not_utf8_read_as_replacements() {
        let mut reader = &b"caf\xe9\n"[..];
        let line = read_line_capped(&mut reader, 100).unwrap().unwrap();
        assert_eq!(line.lossy(), "caf\u{fffd}");
    }
}
