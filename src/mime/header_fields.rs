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

/// The header fields of `raw`, in order, and where the body starts (after
/// the empty line; the end of `raw` when there is none).
pub fn split(raw: &[u8]) -> (Vec<Field<'_>>, usize) {
    let mut fields = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        let line_end = next_line(raw, pos);
        let line = &raw[pos..line_end];
        if line == b"\r\n" || line == b"\n" {
            return (fields, line_end);
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
        fields.push(Field {
            name,
            value,
            raw: field,
            start: pos,
        });
        pos = end;
    }
    (fields, raw.len())
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
        let (fields, body) = split(raw);
        let names: Vec<&[u8]> = fields.iter().map(|f| f.name).collect();
        assert_eq!(names, vec![&b"A"[..], b"Long", b"", b"B"]);
        assert_eq!(fields[1].value, b" x\r\n\ty\r\n z\r\n");
        assert_eq!(fields[1].raw, b"Long : x\r\n\ty\r\n z\r\n");
        assert_eq!(fields[1].start, 6);
        assert!(fields[1].is("long"));
        assert_eq!(fields[2].value, b"no colon\r\n");
        assert_eq!(&raw[body..], b"body: not a field\r\n");

        let (fields, body) = split(b"Only: header");
        assert_eq!((fields.len(), body), (1, 12));
        assert_eq!(split(b"\r\nbody").1, 2);
        assert_eq!(split(b"").0.len(), 0);
    }
}
