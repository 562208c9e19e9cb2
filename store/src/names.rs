//! Range names as PyTorch writes them: `aten::addmm, seq = 12, sizes = [[256], [2048, 6948]]`
//! (`emit_nvtx`, fuseprof's op observer). The collector splits them when it stores a run; the
//! analyzer when it reads names from other sources.

/// An NVTX or op name taken apart: `aten::addmm, seq = 12, sizes = [[256], [2048, 6948]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedName<'a> {
    /// The op type: `aten::addmm`.
    pub name: &'a str,
    /// The `sizes = ` field, when present: `[[256], [2048, 6948]]`.
    pub sizes: Option<&'a str>,
    /// Whether the text carried `key = value` fields (`seq`, `op_id`, `sizes`, ...), which only
    /// PyTorch's emit_nvtx writes.
    pub has_fields: bool,
}

/// Splits a range name into op type and the fields `emit_nvtx` appends.
pub fn parse_range_name(raw: &str) -> ParsedName<'_> {
    let raw = raw.trim();
    // Fields follow the first ", key = " whose key is an identifier.
    let mut cut = None;
    let bytes = raw.as_bytes();
    let mut i = 0;
    while let Some(pos) = raw[i..].find(", ") {
        let at = i + pos;
        let rest = &raw[at + 2..];
        let key_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        if key_len > 0 && rest[key_len..].starts_with(" = ") {
            cut = Some(at);
            break;
        }
        i = at + 2;
        if i >= bytes.len() {
            break;
        }
    }
    let Some(cut) = cut else {
        return ParsedName {
            name: raw,
            sizes: None,
            has_fields: false,
        };
    };
    let fields = &raw[cut..];
    let sizes = fields.find(", sizes = ").map(|p| {
        let s = &fields[p + ", sizes = ".len()..];
        // The sizes list is bracketed; stop at its closing bracket.
        let mut depth = 0i32;
        let mut end = s.len();
        for (j, c) in s.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                ',' if depth == 0 => {
                    end = j;
                    break;
                }
                _ => {}
            }
        }
        s[..end].trim()
    });
    ParsedName {
        name: raw[..cut].trim(),
        sizes,
        has_fields: true,
    }
}
