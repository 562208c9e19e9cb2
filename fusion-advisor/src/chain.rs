//! Chain matching: the op sequences of `patterns.txt` against the ops of one thread that launched
//! GPU work.

use fuseprof_analyzer::OpInstance;

/// One position of a pattern: any of `names`, possibly optional.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub names: Vec<String>,
    pub optional: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    pub id: String,
    pub steps: Vec<Step>,
}

impl Pattern {
    fn required(&self) -> usize {
        self.steps.iter().filter(|s| !s.optional).count()
    }
}

/// The built-in patterns.
pub(crate) const PATTERNS: &str = include_str!("patterns.txt");

/// Parses the pattern file format (see `patterns.txt`).
pub(crate) fn parse_patterns(text: &str) -> Result<Vec<Pattern>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (id, ops) = line
            .split_once('|')
            .ok_or_else(|| format!("line {}: expected `id | ops`", n + 1))?;
        let mut steps = Vec::new();
        for tok in ops.split_whitespace() {
            let (body, optional) = match tok.strip_suffix('?') {
                Some(b) => (b, true),
                None => (tok, false),
            };
            let body = body
                .strip_prefix('(')
                .and_then(|b| b.strip_suffix(')'))
                .unwrap_or(body);
            let names: Vec<String> = body.split('|').map(str::to_string).collect();
            if names
                .iter()
                .any(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            {
                return Err(format!("line {}: bad op token {tok:?}", n + 1));
            }
            steps.push(Step { names, optional });
        }
        if steps.iter().all(|s| s.optional) {
            return Err(format!("line {}: a pattern needs a required op", n + 1));
        }
        out.push(Pattern {
            id: id.trim().to_string(),
            steps,
        });
    }
    Ok(out)
}

/// A match: (pattern step, position in the work stream) of each matched op, and the position of
/// an unrelated op the chain was split by, if one had to be skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Match {
    pub positions: Vec<(usize, usize)>,
    pub split_by: Option<usize>,
}

impl Match {
    /// The position of the op that filled pattern step `step`, if one did.
    pub fn at(&self, step: usize) -> Option<usize> {
        self.positions.iter().find(|p| p.0 == step).map(|p| p.1)
    }
}

fn base(op: &OpInstance) -> &str {
    op.base_name()
}

/// Matches `p` at `start` of `ops` (the work stream of one thread); `taken[i]` marks ops that
/// already belong to a chain. With `allow_split`, one op that is not part of the pattern may
/// stand between two of its ops (patterns of at least three required ops only), and the match
/// says where.
pub(crate) fn match_at(
    p: &Pattern,
    ops: &[&OpInstance],
    taken: &[bool],
    start: usize,
    allow_split: bool,
) -> Option<Match> {
    let mut positions = Vec::with_capacity(p.steps.len());
    let skips = usize::from(allow_split && p.required() >= 3);
    let mut split_by = None;
    if go(
        p,
        ops,
        taken,
        0,
        start,
        skips,
        &mut positions,
        &mut split_by,
    ) {
        Some(Match {
            positions,
            split_by,
        })
    } else {
        None
    }
}

#[allow(clippy::too_many_arguments)]
fn go(
    p: &Pattern,
    ops: &[&OpInstance],
    taken: &[bool],
    step: usize,
    pos: usize,
    skips: usize,
    positions: &mut Vec<(usize, usize)>,
    split_by: &mut Option<usize>,
) -> bool {
    if step == p.steps.len() {
        return true;
    }
    let s = &p.steps[step];
    let fits = |i: usize| i < ops.len() && !taken[i] && s.names.iter().any(|n| n == base(ops[i]));
    if fits(pos) {
        positions.push((step, pos));
        if go(p, ops, taken, step + 1, pos + 1, skips, positions, split_by) {
            return true;
        }
        positions.pop();
    }
    if s.optional && go(p, ops, taken, step + 1, pos, skips, positions, split_by) {
        return true;
    }
    // Skip one unrelated op, only inside the chain (never before its first or after its last op).
    if skips > 0 && !positions.is_empty() && pos < ops.len() && !taken[pos] && fits(pos + 1) {
        *split_by = Some(pos);
        if go(p, ops, taken, step, pos + 1, 0, positions, split_by) {
            return true;
        }
        *split_by = None;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str) -> OpInstance {
        OpInstance {
            thread: 0,
            start_ns: 0,
            end_ns: 1,
            name: format!("aten::{name}"),
            dims: None,
            dtypes: None,
            module: None,
            step: None,
            gpu_ns: 1,
            records: Vec::new(),
        }
    }

    fn run(pattern: &str, names: &[&str], split: bool) -> Option<Match> {
        let p = &parse_patterns(&format!("t | {pattern}")).unwrap()[0];
        let ops: Vec<OpInstance> = names.iter().map(|n| op(n)).collect();
        let refs: Vec<&OpInstance> = ops.iter().collect();
        match_at(p, &refs, &vec![false; refs.len()], 0, split)
    }

    #[test]
    fn the_builtin_patterns_parse() {
        let p = parse_patterns(PATTERNS).unwrap();
        assert_eq!(p[0].id, "window_attention");
        assert!(p.iter().any(|p| p.id == "odd_gemm"));
    }

    #[test]
    fn optional_and_alternative_steps() {
        let m = run(
            "mul? matmul (div|mul)? softmax",
            &["matmul", "div", "softmax"],
            false,
        );
        assert_eq!(m.unwrap().positions, vec![(1, 0), (2, 1), (3, 2)]);
        let m = run(
            "mul? matmul (div|mul)? softmax",
            &["mul", "matmul", "softmax"],
            false,
        );
        assert_eq!(m.unwrap().positions, vec![(0, 0), (1, 1), (3, 2)]);
        assert!(run("matmul softmax", &["matmul", "add", "softmax"], false).is_none());
    }

    #[test]
    fn an_optional_step_backtracks() {
        // `add?` must not swallow the add that the next step needs.
        let m = run(
            "matmul add? add softmax",
            &["matmul", "add", "softmax"],
            false,
        )
        .unwrap();
        assert_eq!(m.positions, vec![(0, 0), (2, 1), (3, 2)]);
        assert_eq!(m.at(1), None);
        assert_eq!(m.at(2), Some(1));
    }

    #[test]
    fn a_split_chain_is_found_only_when_asked_and_says_where() {
        let names = ["matmul", "softmax", "cat", "matmul"];
        assert!(run("matmul softmax matmul", &names, false).is_none());
        let m = run("matmul softmax matmul", &names, true).unwrap();
        assert_eq!(m.positions, vec![(0, 0), (1, 1), (2, 3)]);
        assert_eq!(m.split_by, Some(2));
        // Short patterns never skip.
        assert!(run("linear gelu", &["linear", "cat", "gelu"], true).is_none());
    }

    #[test]
    fn bad_pattern_lines_are_refused() {
        assert!(parse_patterns("x").is_err());
        assert!(parse_patterns("x | a? b?").is_err());
        assert!(parse_patterns("x | a-b").is_err());
    }
}
