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

#[derive(Clone, Debug, PartialEq)]
enum Test {
    Contains(String),
    Prefix(String),
    Lacks(String),
    ThreadsAtLeast(i64),
    ThreadsAtMost(i64),
    BlocksAtLeast(i64),
    BlocksAtMost(i64),
    SmemAtLeast(i64),
    SmemAtMost(i64),
}

impl Test {
    fn holds(&self, name: &str, shape: &LaunchShape) -> bool {
        let threads = shape.block.map(|b| b.iter().product::<i64>());
        let blocks = shape.grid.map(|g| g.iter().product::<i64>());
        match self {
            Test::Contains(t) => name.contains(t.as_str()),
            Test::Prefix(t) => name.starts_with(t.as_str()),
            Test::Lacks(t) => !name.contains(t.as_str()),
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
}

/// The rules shipped with fuseprof.
pub const DEFAULT_RULES: &str = include_str!("classify_rules.txt");

impl Rules {
    /// Parses rules in the format `classify_rules.txt` documents.
    pub fn parse(text: &str) -> Result<Rules> {
        let mut rules = Vec::new();
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
                    "contains" => Test::Contains(arg.into()),
                    "prefix" => Test::Prefix(arg.into()),
                    "lacks" => Test::Lacks(arg.into()),
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
                .any(|t| !matches!(t, Test::Contains(_) | Test::Prefix(_) | Test::Lacks(_)))
        });
        Ok(Rules { rules, uses_shape })
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
        self.rules
            .iter()
            .find(|r| r.tests.iter().all(|t| t.holds(name, shape)))
            .map_or(Class::Other, |r| r.class)
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::builtin()
    }
}
