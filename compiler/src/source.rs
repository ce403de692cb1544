//! Source text and byte spans.
//!
//! Every diagnostic is built from a [`Span`] into a [`Source`]: byte offsets, so
//! they can be sliced from the text directly, converted to 1-based line and
//! (character) column only when rendered.

use std::fmt;

/// A half-open byte range `[start, end)` into one [`Source`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        let start = u32::try_from(start).unwrap_or(u32::MAX);
        let end = u32::try_from(end).unwrap_or(u32::MAX).max(start);
        Self { start, end }
    }

    /// An empty span at `offset`, for "something is missing here".
    pub fn at(offset: usize) -> Self {
        Self::new(offset, offset)
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// The sub-span `[from, to)` relative to this span's start.
    pub fn slice(self, from: usize, to: usize) -> Self {
        let start = self.start as usize;
        Self::new(start + from, start + to)
    }
}

/// One input file: a display name and its text, with a line index.
#[derive(Debug, Clone)]
pub struct Source {
    name: String,
    text: String,
    line_starts: Vec<u32>,
}

/// A 1-based line and 1-based character column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

impl Source {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| u32::try_from(i + 1).unwrap_or(u32::MAX)),
        );
        Self {
            name: name.into(),
            text,
            line_starts,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn slice(&self, span: Span) -> &str {
        self.text.get(span.range()).unwrap_or("")
    }

    /// Line and character column of a byte offset (clamped to the text).
    pub fn position(&self, offset: u32) -> Position {
        let offset = offset.min(u32::try_from(self.text.len()).unwrap_or(u32::MAX));
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line] as usize;
        let end = floor_char_boundary(&self.text, offset as usize);
        let column = self.text[start..end].chars().count() + 1;
        Position {
            line: line + 1,
            column,
        }
    }

    /// The byte offset where a 0-based line starts.
    pub fn line_start(&self, line: usize) -> usize {
        self.line_starts
            .get(line)
            .map_or(self.text.len(), |&s| s as usize)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let src = Source::new("f", "a: 1\nnäme: x\n");
        assert_eq!(src.position(0), Position { line: 1, column: 1 });
        assert_eq!(src.position(5), Position { line: 2, column: 1 });
        // 'x' sits after the two-byte 'ä': byte 12, character column 7.
        assert_eq!(src.position(12), Position { line: 2, column: 7 });
        assert_eq!(src.position(1000).line, 3);
    }
}
