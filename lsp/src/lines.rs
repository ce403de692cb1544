//! Byte offsets and LSP positions. The compiler's spans are byte offsets;
//! LSP counts a position's `character` in UTF-16 code units (the encoding
//! every client supports) and ends lines at `\n`, `\r\n` or `\r`.

use lsp_types::{Position, Range};

/// Where each line of a text starts.
#[derive(Debug)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' => {
                    if bytes.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    starts.push(i + 1);
                }
                _ => {}
            }
            i += 1;
        }
        Self { starts }
    }

    /// The position of a byte offset (clamped to the text, and to the
    /// character it falls in).
    pub(crate) fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let character: usize = text[start..offset].chars().map(char::len_utf16).sum();
        Position::new(to_u32(line), to_u32(character))
    }

    pub(crate) fn range(&self, text: &str, start: usize, end: usize) -> Range {
        Range::new(self.position(text, start), self.position(text, end))
    }

    /// The byte offset of a position. A position past the end of its line
    /// is the line's end, past the last line the text's end, and one
    /// inside a surrogate pair the end of that character (as LSP asks).
    pub(crate) fn offset(&self, text: &str, position: Position) -> usize {
        let line = position.line as usize;
        let Some(&start) = self.starts.get(line) else {
            return text.len();
        };
        let end = self.line_end(text, line);
        let mut units = 0;
        for (i, c) in text[start..end].char_indices() {
            if units >= position.character as usize {
                return start + i;
            }
            units += c.len_utf16();
        }
        end
    }

    /// Where line `line`'s content ends (before its terminator).
    fn line_end(&self, text: &str, line: usize) -> usize {
        let next = self.starts.get(line + 1).copied().unwrap_or(text.len());
        let content = &text[self.starts[line]..next];
        self.starts[line] + content.trim_end_matches(['\n', '\r']).len()
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_units() {
        // `é` is 2 bytes and 1 unit; `😀` is 4 bytes and 2 units.
        let text = "a: é😀x\nb: 1\r\nc\rd";
        let index = LineIndex::new(text);
        let x = text.find('x').unwrap();
        assert_eq!(index.position(text, x), Position::new(0, 6));
        assert_eq!(index.offset(text, Position::new(0, 6)), x);
        // Inside the surrogate pair: the end of the emoji.
        assert_eq!(index.offset(text, Position::new(0, 5)), x);
        let b = text.find('b').unwrap();
        assert_eq!(index.position(text, b), Position::new(1, 0));
        assert_eq!(index.position(text, text.find('c').unwrap()).line, 2);
        assert_eq!(
            index.position(text, text.find('d').unwrap()),
            Position::new(3, 0)
        );
        // Past a line's end: that line's end, before `\r\n`.
        assert_eq!(index.offset(text, Position::new(1, 99)), b + 4);
        assert_eq!(index.offset(text, Position::new(9, 0)), text.len());
        // Inside a character: its start.
        assert_eq!(index.position(text, x - 1), Position::new(0, 4));
    }
}
