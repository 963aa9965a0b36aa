//! The header section of a raw message as it is on the wire: each field
//! with its folded lines, byte for byte (what DKIM hashes and what an edit
//! of the header removes).

/// One header field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The name, without blanks before the colon; empty for a line that has
    /// no colon.
    pub name: &'a [u8],
    /// Everything after the colon, folded lines and final line break included.
    pub value: &'a [u8],
    /// The whole field.
    pub raw: &'a [u8],
    /// Where `raw` starts in the message.
    pub start: usize,
}

impl Field<'_> {
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name.as_bytes())
    }
}

/// The header fields of `raw`, in order, read as they are iterated.
pub fn fields(raw: &[u8]) -> Fields<'_> {
    Fields {
        raw,
        pos: 0,
        ended: false,
    }
}

/// Where the body of `raw` starts: after the empty line that ends the
/// header, or at the end when there is none.
pub fn body_start(raw: &[u8]) -> usize {
    let mut fields = fields(raw);
    for _ in fields.by_ref() {}
    fields.pos
}

/// Iterator over header fields; see [`fields`].
pub struct Fields<'a> {
    raw: &'a [u8],
    /// Where the next field starts; at the end, where the body starts.
    pos: usize,
    /// The empty line after the header was read.
    ended: bool,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Field<'a>;

    fn next(&mut self) -> Option<Field<'a>> {
        let raw = self.raw;
        let pos = self.pos;
        if self.ended || pos >= raw.len() {
            return None;
        }
        let line_end = next_line(raw, pos);
        let line = &raw[pos..line_end];
        if line == b"\r\n" || line == b"\n" {
            self.pos = line_end;
            self.ended = true;
            return None;
        }
        let mut end = line_end;
        while end < raw.len() && matches!(raw[end], b' ' | b'\t') {
            end = next_line(raw, end);
        }
        let field = &raw[pos..end];
        let (name, value) = match field.iter().position(|b| *b == b':') {
            Some(colon) if colon < line.len() => {
                let mut name = &field[..colon];
                while let [rest @ .., b' ' | b'\t'] = name {
                    name = rest;
                }
                (name, &field[colon + 1..])
            }
            _ => (&field[..0], field),
        };
        self.pos = end;
        Some(Field {
            name,
            value,
            raw: field,
            start: pos,
        })
    }
}

/// Where the line starting at `pos` ends (after its LF, or at the end).
fn next_line(raw: &[u8], pos: usize) -> usize {
    match raw[pos..].iter().position(|b| *b == b'\n') {
        Some(i) => pos + i + 1,
        None => raw.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_folding_and_body() {
        let raw = b"A: 1\r\nLong : x\r\n\ty\r\n z\r\nno colon\r\nB:\r\n\r\nbody: not a field\r\n";
        let fields: Vec<Field<'_>> = fields(raw).collect();
        let names: Vec<&[u8]> = fields.iter().map(|f| f.name).collect();
        assert_eq!(names, vec![&b"A"[..], b"Long", b"", b"B"]);
        assert_eq!(fields[1].value, b" x\r\n\ty\r\n z\r\n");
        assert_eq!(fields[1].raw, b"Long : x\r\n\ty\r\n z\r\n");
        assert_eq!(fields[1].start, 6);
        assert!(fields[1].is("long"));
        assert_eq!(fields[2].value, b"no colon\r\n");
        assert_eq!(&raw[body_start(raw)..], b"body: not a field\r\n");

        assert_eq!(super::fields(b"Only: header").count(), 1);
        assert_eq!(body_start(b"Only: header"), 12);
        assert_eq!(body_start(b"\r\nbody"), 2);
        assert_eq!(super::fields(b"").count(), 0);
    }
}
