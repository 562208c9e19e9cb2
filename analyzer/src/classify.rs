//! Kernel classes from names and launch shapes. The rules are data (`classify_rules.txt`,
//! compiled in); this file only reads and applies them.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What kind of work a GPU record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Class {
    #[serde(rename = "gemm")]
    Gemm,
    #[serde(rename = "attention")]
    Attention,
    #[serde(rename = "conv")]
    Conv,
    #[serde(rename = "elementwise")]
    Elementwise,
    #[serde(rename = "reduction")]
    Reduction,
    #[serde(rename = "normalization")]
    Normalization,
    #[serde(rename = "softmax")]
    Softmax,
    #[serde(rename = "copy/layout")]
    CopyLayout,
    #[serde(rename = "memcpy")]
    Memcpy,
    #[serde(rename = "memset")]
    Memset,
    #[serde(rename = "communication")]
    Communication,
    #[serde(rename = "other")]
    Other,
}

impl Class {
    pub const ALL: [Class; 12] = [
        Class::Gemm,
        Class::Attention,
        Class::Conv,
        Class::Elementwise,
        Class::Reduction,
        Class::Normalization,
        Class::Softmax,
        Class::CopyLayout,
        Class::Memcpy,
        Class::Memset,
        Class::Communication,
        Class::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Gemm => "gemm",
            Class::Attention => "attention",
            Class::Conv => "conv",
            Class::Elementwise => "elementwise",
            Class::Reduction => "reduction",
            Class::Normalization => "normalization",
            Class::Softmax => "softmax",
            Class::CopyLayout => "copy/layout",
            Class::Memcpy => "memcpy",
            Class::Memset => "memset",
            Class::Communication => "communication",
            Class::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How a kernel was launched, where the trace says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchShape {
    pub grid: Option<[i64; 3]>,
    pub block: Option<[i64; 3]>,
    pub smem_bytes: Option<i64>,
}

/// A rule's test. `Contains` and `Lacks` carry their text's index among the rules' texts
/// ([`Rules::texts`]).
#[derive(Clone, Debug, PartialEq)]
enum Test {
    Contains(String, usize),
    Prefix(String),
    Lacks(String, usize),
    ThreadsAtLeast(i64),
    ThreadsAtMost(i64),
    BlocksAtLeast(i64),
    BlocksAtMost(i64),
    SmemAtLeast(i64),
    SmemAtMost(i64),
}

impl Test {
    /// Whether the test holds for `name` and `shape`; `found(i)`: whether the rules' text `i`
    /// occurs in `name`.
    fn holds(&self, name: &str, shape: &LaunchShape, found: &impl Fn(usize) -> bool) -> bool {
        let threads = shape.block.map(|b| b.iter().product::<i64>());
        let blocks = shape.grid.map(|g| g.iter().product::<i64>());
        match self {
            Test::Contains(_, i) => found(*i),
            Test::Prefix(t) => name.starts_with(t.as_str()),
            Test::Lacks(_, i) => !found(*i),
            Test::ThreadsAtLeast(n) => threads.is_some_and(|v| v >= *n),
            Test::ThreadsAtMost(n) => threads.is_some_and(|v| v <= *n),
            Test::BlocksAtLeast(n) => blocks.is_some_and(|v| v >= *n),
            Test::BlocksAtMost(n) => blocks.is_some_and(|v| v <= *n),
            Test::SmemAtLeast(n) => shape.smem_bytes.is_some_and(|v| v >= *n),
            Test::SmemAtMost(n) => shape.smem_bytes.is_some_and(|v| v <= *n),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    class: Class,
    tests: Vec<Test>,
}

/// An ordered list of classification rules; the first that matches wins, and a kernel no rule
/// matches is [`Class::Other`].
#[derive(Clone, Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    uses_shape: bool,
    /// Every `contains` and `lacks` text, all found in a name in one pass: a run's names are
    /// classified a name each (NVTX texts included), and testing the texts one by one took
    /// most of that.
    texts: aho_corasick::AhoCorasick,
    text_count: usize,
}

/// The rules shipped with fuseprof.
pub const DEFAULT_RULES: &str = include_str!("classify_rules.txt");

impl Rules {
    /// Parses rules in the format `classify_rules.txt` documents.
    pub fn parse(text: &str) -> Result<Rules> {
        let mut rules = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        let mut text_index = |t: &str| match texts.iter().position(|x| x == t) {
            Some(i) => i,
            None => {
                texts.push(t.to_string());
                texts.len() - 1
            }
        };
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let err = |what: String| Error::Rules {
                line: line_no,
                what,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let class_word = words.next().unwrap_or_default();
            let class = Class::parse(class_word)
                .ok_or_else(|| err(format!("unknown class {class_word:?}")))?;
            let mut tests = Vec::new();
            while let Some(test) = words.next() {
                let arg = words
                    .next()
                    .ok_or_else(|| err(format!("test {test:?} has no argument")))?;
                let num = || {
                    arg.parse::<i64>()
                        .map_err(|_| err(format!("{test} needs a number, got {arg:?}")))
                };
                tests.push(match test {
                    "contains" => Test::Contains(arg.into(), text_index(arg)),
                    "prefix" => Test::Prefix(arg.into()),
                    "lacks" => Test::Lacks(arg.into(), text_index(arg)),
                    "threads>=" => Test::ThreadsAtLeast(num()?),
                    "threads<=" => Test::ThreadsAtMost(num()?),
                    "blocks>=" => Test::BlocksAtLeast(num()?),
                    "blocks<=" => Test::BlocksAtMost(num()?),
                    "smem>=" => Test::SmemAtLeast(num()?),
                    "smem<=" => Test::SmemAtMost(num()?),
                    other => return Err(err(format!("unknown test {other:?}"))),
                });
            }
            if tests.is_empty() {
                return Err(err("a rule needs at least one test".into()));
            }
            rules.push(Rule { class, tests });
        }
        let uses_shape = rules.iter().any(|r| {
            r.tests
                .iter()
                .any(|t| !matches!(t, Test::Contains(..) | Test::Prefix(_) | Test::Lacks(..)))
        });
        let text_count = texts.len();
        let texts = aho_corasick::AhoCorasick::new(&texts).map_err(|e| Error::Rules {
            line: 0,
            what: format!("the rules' texts: {e}"),
        })?;
        Ok(Rules {
            rules,
            uses_shape,
            texts,
            text_count,
        })
    }

    /// The rules shipped with fuseprof.
    pub fn builtin() -> Rules {
        Rules::parse(DEFAULT_RULES).expect("the built-in rules parse (tested)")
    }

    /// Whether any rule looks at the launch shape (so a name alone may not decide the class).
    pub fn uses_shape(&self) -> bool {
        self.uses_shape
    }

    /// The class of a kernel called `name` launched with `shape`.
    pub fn classify(&self, name: &str, shape: &LaunchShape) -> Class {
        // Which texts occur in `name`, as bits (on the stack for up to 256 texts).
        let words = self.text_count.div_ceil(64);
        let mut small = [0u64; 4];
        let mut big = Vec::new();
        let found: &mut [u64] = if words <= small.len() {
            &mut small[..words]
        } else {
            big.resize(words, 0);
            &mut big
        };
        for m in self.texts.find_overlapping_iter(name) {
            let i = m.pattern().as_usize();
            found[i / 64] |= 1 << (i % 64);
        }
        let found = |i: usize| found[i / 64] & (1 << (i % 64)) != 0;
        self.rules
            .iter()
            .find(|r| r.tests.iter().all(|t| t.holds(name, shape, &found)))
            .map_or(Class::Other, |r| r.class)
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class by testing each rule's texts one by one, as the rules read.
    fn classify_one_by_one(rules: &Rules, name: &str, shape: &LaunchShape) -> Class {
        let holds = |t: &Test| match t {
            Test::Contains(text, _) => name.contains(text.as_str()),
            Test::Lacks(text, _) => !name.contains(text.as_str()),
            other => other.holds(name, shape, &|_| unreachable!("a text test")),
        };
        rules
            .rules
            .iter()
            .find(|r| r.tests.iter().all(holds))
            .map_or(Class::Other, |r| r.class)
    }

    /// Finding every text in one pass classifies as testing them one by one: the rules' own
    /// texts, pairs of them (overlaps, a `lacks` text next to a `contains` one), and texts cut
    /// short, under several launch shapes.
    #[test]
    fn one_pass_classifies_as_one_by_one() {
        let rules = Rules::builtin();
        let texts: Vec<&str> = rules
            .rules
            .iter()
            .flat_map(|r| r.tests.iter())
            .filter_map(|t| match t {
                Test::Contains(x, _) | Test::Lacks(x, _) | Test::Prefix(x) => Some(x.as_str()),
                _ => None,
            })
            .collect();
        let mut names: Vec<String> = vec![String::new(), "aten::add, op_id = 7".into()];
        for (i, a) in texts.iter().enumerate() {
            names.push(a.to_string());
            names.push(format!("void {a}<float>"));
            names.push(a[..a.len() / 2].to_string());
            for b in texts.iter().skip(i % 7).step_by(7) {
                names.push(format!("{a}{b}"));
                names.push(format!("{b}_{a}_kernel"));
            }
        }
        let shapes = [
            LaunchShape::default(),
            LaunchShape {
                grid: Some([1, 1, 1]),
                block: Some([32, 1, 1]),
                smem_bytes: Some(0),
            },
            LaunchShape {
                grid: Some([4096, 8, 1]),
                block: Some([1024, 1, 1]),
                smem_bytes: Some(200_000),
            },
        ];
        for name in &names {
            for shape in &shapes {
                assert_eq!(
                    rules.classify(name, shape),
                    classify_one_by_one(&rules, name, shape),
                    "{name:?} {shape:?}"
                );
            }
        }
    }
}
