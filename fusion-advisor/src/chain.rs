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

/// A match: (pattern step, position in the work stream) of each matched op, the position of
/// an unrelated op the chain was split by, if one had to be skipped, and the ops skipped because
/// they read none of the chain's tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Match {
    pub positions: Vec<(usize, usize)>,
    pub split_by: Option<usize>,
    pub independent: Vec<usize>,
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

/// Ops the matcher may step over inside a chain when they read none of its tensors.
const INDEPENDENT_SKIPS: usize = 2;

/// Matches `p` at `start` of `ops` (the work stream of one thread); `taken[i]` marks ops that
/// already belong to a chain. Inside the chain (never before its first op or after its last),
/// up to two ops may stand between two of its ops when they read none of the chain's tensors:
/// no input of two or more dimensions has as many elements as an input of the chain's ops
/// (which tells tensors apart where the trace records shapes and not identities). A kernel replacing the
/// chain runs before or after them: torchvision gathers the relative-position bias between a
/// Swin block's LayerNorm and its window partition. With `allow_split`, one other op may stand
/// there too (patterns of at least three required ops only), and the match says where: one
/// kernel would have to run it in the middle.
pub(crate) fn match_at(
    p: &Pattern,
    ops: &[&OpInstance],
    taken: &[bool],
    start: usize,
    allow_split: bool,
) -> Option<Match> {
    let mut m = Match {
        positions: Vec::with_capacity(p.steps.len()),
        split_by: None,
        independent: Vec::new(),
    };
    let skips = usize::from(allow_split && p.required() >= 3);
    go(p, ops, taken, 0, start, skips, &mut m).then_some(m)
}

/// True when `op` has recorded shapes and none of its inputs of two or more dimensions has as
/// many elements as an input of the ops at `positions` (a view of a chain's tensor keeps its
/// size, whatever its shape).
fn reads_none_of(op: &OpInstance, ops: &[&OpInstance], positions: &[(usize, usize)]) -> bool {
    let Some(dims) = &op.dims else {
        return false;
    };
    let size = |d: &Vec<i64>| (d.len() >= 2).then(|| d.iter().product::<i64>());
    let chain: Vec<i64> = positions
        .iter()
        .filter_map(|&(_, q)| ops[q].dims.as_ref())
        .flatten()
        .filter_map(size)
        .collect();
    dims.iter().any(|d| d.len() >= 2) && dims.iter().filter_map(size).all(|n| !chain.contains(&n))
}

fn go(
    p: &Pattern,
    ops: &[&OpInstance],
    taken: &[bool],
    step: usize,
    pos: usize,
    skips: usize,
    m: &mut Match,
) -> bool {
    if step == p.steps.len() {
        // Checked against the whole chain: a later op of it may read what a skipped op read.
        return m
            .independent
            .iter()
            .all(|&i| reads_none_of(ops[i], ops, &m.positions));
    }
    let s = &p.steps[step];
    let fits = |i: usize| i < ops.len() && !taken[i] && s.names.iter().any(|n| n == base(ops[i]));
    if fits(pos) {
        m.positions.push((step, pos));
        if go(p, ops, taken, step + 1, pos + 1, skips, m) {
            return true;
        }
        m.positions.pop();
    }
    // Step over ops that read none of the chain's tensors, up to an op of this step (before
    // passing over an optional step: the op after them may be the one it wants).
    let inside = !m.positions.is_empty() && pos < ops.len() && !taken[pos];
    if inside {
        let mut next = pos;
        while m.independent.len() + (next - pos) < INDEPENDENT_SKIPS
            && next < ops.len()
            && !taken[next]
            && reads_none_of(ops[next], ops, &m.positions)
        {
            next += 1;
            if fits(next) {
                let kept = m.independent.len();
                m.independent.extend(pos..next);
                if go(p, ops, taken, step, next, skips, m) {
                    return true;
                }
                m.independent.truncate(kept);
            }
        }
    }
    if s.optional && go(p, ops, taken, step + 1, pos, skips, m) {
        return true;
    }
    // Skip one unrelated op (a split).
    if inside && skips > 0 && fits(pos + 1) {
        m.split_by = Some(pos);
        if go(p, ops, taken, step, pos + 1, 0, m) {
            return true;
        }
        m.split_by = None;
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
    fn ops_that_read_none_of_the_chain_are_stepped_over() {
        let with = |name: &str, dims: &[&[i64]]| OpInstance {
            dims: Some(dims.iter().map(|d| d.to_vec()).collect()),
            ..op(name)
        };
        let map: &[i64] = &[64, 56, 56, 96];
        let ops = [
            with("layer_norm", &[map, &[], &[96], &[96]]),
            with("index", &[&[169, 3], &[2401]]),
            with("contiguous", &[&[3, 49, 49]]),
            with("pad", &[map]),
            with("reshape", &[&[64, 8, 8, 7, 7, 96]]),
        ];
        let refs: Vec<&OpInstance> = ops.iter().collect();
        let p = &parse_patterns("t | layer_norm pad? reshape").unwrap()[0];
        let m = match_at(p, &refs, &[false; 5], 0, false).unwrap();
        assert_eq!(m.positions, vec![(0, 0), (1, 3), (2, 4)]);
        assert_eq!((m.independent.clone(), m.split_by), (vec![1, 2], None));
        // An op reading a tensor of the chain's size, in any shape, is not stepped over.
        let mut dependent = ops.clone();
        dependent[2] = with("contiguous", &[&[64, 56 * 56, 96]]);
        let refs: Vec<&OpInstance> = dependent.iter().collect();
        assert!(match_at(p, &refs, &[false; 5], 0, false).is_none());
        // Nor one without recorded shapes, nor a third one.
        let bare = [op("layer_norm"), op("index"), op("pad"), op("reshape")];
        let refs: Vec<&OpInstance> = bare.iter().collect();
        assert!(match_at(p, &refs, &[false; 4], 0, false).is_none());
        let mut three = ops.to_vec();
        three.insert(1, with("index", &[&[169, 3], &[2401]]));
        let refs: Vec<&OpInstance> = three.iter().collect();
        assert!(match_at(p, &refs, &[false; 6], 0, false).is_none());
    }

    #[test]
    fn bad_pattern_lines_are_refused() {
        assert!(parse_patterns("x").is_err());
        assert!(parse_patterns("x | a? b?").is_err());
        assert!(parse_patterns("x | a-b").is_err());
    }
}
