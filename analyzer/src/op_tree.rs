//! The operator tree as a person browses it: modules, then the ops inside them (outermost op
//! first, nested ops below it), then the kernels, copies and fills each op launched, with self
//! and total GPU time per node. Same instances are merged: every `aten::linear` of
//! `layers.0.blocks.1.mlp` is one node. `fuseprof tui` shows it; the hotspot tables are flat
//! cuts of the same attribution.

use serde::Serialize;

use crate::attribution::Item;
use crate::classify::Class;
use crate::fxmap::FxMap;
use crate::hotspots::Accumulated;
use crate::ops::{Names, Role, Tree, NONE};
use crate::{analyze_inner, Analysis, AnalyzeConfig, Result, Rules};
use fuseprof_store::Store;

/// What a node of the [`OpTree`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpNodeKind {
    /// The run (node 0).
    Root,
    /// A module frame or user range (`nn.Module` path component, NVTX range).
    Module,
    /// A PyTorch op (or an autograd function, a step annotation's op-like ranges).
    Op,
    /// A kernel, copy or fill, by name.
    Kernel,
    /// GPU work launched outside every range.
    Outside,
}

/// One node of the tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpNode {
    pub kind: OpNodeKind,
    /// Module path component, op type, or kernel name (copies: `Memcpy HtoD`).
    pub name: String,
    /// GPU time of this node less its children of the same kind: for a module, its ops that
    /// are not in a sub-module; for an op, the records it launched itself; for a kernel, all.
    pub self_ns: i64,
    /// GPU time of everything below the node.
    pub total_ns: i64,
    /// GPU records below the node.
    pub records: u64,
    /// Ranges merged into this node (modules: all of them, in a step's scope those that start
    /// in the step; ops: those with GPU work at or below them); records for kernels.
    pub instances: u64,
    /// The kernel class, for kernel nodes.
    pub class: Option<Class>,
    pub parent: Option<usize>,
    /// By total GPU time, largest first.
    pub children: Vec<usize>,
}

/// Modules -> ops -> kernels; node 0 is the root.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpTree {
    pub nodes: Vec<OpNode>,
}

impl OpTree {
    /// The names from the root down to `node` (the root left out).
    pub fn path(&self, mut node: usize) -> Vec<&str> {
        let mut out = Vec::new();
        while let Some(p) = self.nodes[node].parent {
            out.push(self.nodes[node].name.as_str());
            node = p;
        }
        out.reverse();
        out
    }
}

/// What [`analyze_inner`] shows a caller once the records are accumulated: the tree, the
/// records in scope, their groups, the names, and the scope's window (a step's `[start, end)`).
pub(crate) type Hook<'a> = dyn FnMut(&Tree, &[Item], &Accumulated, &Names, Option<(i64, i64)>) + 'a;

struct Builder<'a> {
    nodes: Vec<OpNode>,
    index: FxMap<(u32, OpNodeKind, u32), u32>,
    names: &'a Names,
    /// Tree node of each module id.
    module_node: Vec<u32>,
    /// Tree node of each range (op ranges) or NONE where not yet made.
    range_node: Vec<u32>,
}

impl Builder<'_> {
    /// The child of `parent` for (`kind`, `name`), made where missing with the name `text`
    /// gives (called only then: most lookups find the node).
    fn child(
        &mut self,
        parent: u32,
        kind: OpNodeKind,
        name: u32,
        text: impl FnOnce() -> String,
    ) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.index.entry((parent, kind, name)).or_insert(next);
        if id == next {
            self.nodes.push(OpNode {
                kind,
                name: text(),
                self_ns: 0,
                total_ns: 0,
                records: 0,
                instances: 0,
                class: None,
                parent: Some(parent as usize),
                children: Vec::new(),
            });
            self.nodes[parent as usize].children.push(id as usize);
        }
        id
    }

    /// The node of module id `m`, made with its ancestors where missing.
    fn module(&mut self, acc: &Accumulated, m: u32) -> u32 {
        if m == 0 || m == NONE {
            return 0;
        }
        if self.module_node[m as usize] != NONE {
            return self.module_node[m as usize];
        }
        let (parent, name) = acc.modules.nodes[m as usize];
        let up = self.module(acc, parent);
        let names = self.names;
        let id = self.child(up, OpNodeKind::Module, name, || {
            names
                .get(name)
                .trim_start_matches("nn.Module: ")
                .to_string()
        });
        self.module_node[m as usize] = id;
        id
    }

    /// The node of the range `r` that launched GPU work: its module's node, then one op node
    /// per op from the outermost op inside that module down to `r`.
    fn range(&mut self, tree: &Tree, acc: &Accumulated, r: u32) -> u32 {
        if self.range_node[r as usize] != NONE {
            return self.range_node[r as usize];
        }
        let rec = tree.ranges[r as usize];
        let id = if rec.role() == Role::Op {
            let p = tree.parent[r as usize];
            let up = if p != NONE && tree.ranges[p as usize].role() == Role::Op {
                self.range(tree, acc, p)
            } else {
                self.module(acc, acc.module_of[r as usize])
            };
            let names = self.names;
            let id = self.child(up, OpNodeKind::Op, rec.name, || {
                names.get(rec.name).to_string()
            });
            self.nodes[id as usize].instances += 1;
            id
        } else {
            // A module, user or step range launched the work itself.
            self.module(acc, acc.module_of[r as usize])
        };
        self.range_node[r as usize] = id;
        id
    }
}

pub(crate) fn build(
    tree: &Tree,
    items: &[Item],
    acc: &Accumulated,
    names: &Names,
    scope: Option<(i64, i64)>,
) -> OpTree {
    let mut b = Builder {
        nodes: vec![OpNode {
            kind: OpNodeKind::Root,
            name: "(run)".into(),
            self_ns: 0,
            total_ns: 0,
            records: 0,
            instances: 0,
            class: None,
            parent: None,
            children: Vec::new(),
        }],
        index: FxMap::default(),
        names,
        module_node: vec![NONE; acc.modules.nodes.len()],
        range_node: vec![NONE; tree.ranges.len()],
    };
    for it in items {
        let up = if it.owner == NONE {
            b.child(0, OpNodeKind::Outside, NONE, || {
                "(outside any range)".into()
            })
        } else {
            b.range(tree, acc, it.owner)
        };
        let k = b.child(up, OpNodeKind::Kernel, it.name, || {
            names.get(it.name).to_string()
        });
        let node = &mut b.nodes[k as usize];
        node.class = Some(it.class);
        node.self_ns += it.dur_ns;
        node.instances += 1;
    }
    // Module instances: every module or user range (in a step's scope: that starts in the
    // step, as op instances count), counted where its node exists.
    let mut module_ranges = vec![0u64; acc.modules.nodes.len()];
    let in_scope = |t: i64| scope.is_none_or(|(from, to)| t >= from && t < to);
    for (i, r) in tree.ranges.iter().enumerate() {
        if matches!(r.role(), Role::Module | Role::User) && in_scope(r.start_ns) {
            module_ranges[acc.module_of[i] as usize] += 1;
        }
    }
    for (m, &node) in b.module_node.iter().enumerate() {
        if node != NONE {
            b.nodes[node as usize].instances = module_ranges[m];
        }
    }
    let mut nodes = b.nodes;
    // Totals bottom-up: a child's id is always above its parent's.
    for i in (0..nodes.len()).rev() {
        if nodes[i].kind == OpNodeKind::Kernel {
            nodes[i].total_ns = nodes[i].self_ns;
            nodes[i].records = nodes[i].instances;
        }
        if let Some(p) = nodes[i].parent {
            let (t, r) = (nodes[i].total_ns, nodes[i].records);
            nodes[p].total_ns += t;
            nodes[p].records += r;
        }
    }
    for i in 0..nodes.len() {
        if nodes[i].kind == OpNodeKind::Kernel {
            continue;
        }
        let same_kind: i64 = nodes[i]
            .children
            .iter()
            .filter(|&&c| nodes[c].kind == nodes[i].kind)
            .map(|&c| nodes[c].total_ns)
            .sum();
        nodes[i].self_ns = nodes[i].total_ns - same_kind;
        let mut children = std::mem::take(&mut nodes[i].children);
        children.sort_by(|&a, &b| {
            (nodes[b].total_ns, &nodes[a].name).cmp(&(nodes[a].total_ns, &nodes[b].name))
        });
        nodes[i].children = children;
    }
    OpTree { nodes }
}

/// [`crate::analyze_with_rules`] plus the [`OpTree`] of the same records (restricted to
/// `cfg.step` like every table).
pub fn analyze_with_op_tree(
    store: &mut Store,
    cfg: &AnalyzeConfig,
    rules: &Rules,
) -> Result<(Analysis, OpTree)> {
    analyze_with_op_tree_observed(store, cfg, rules, None)
}

/// [`analyze_with_op_tree`], with `observer` shown every row of the run's tables as the
/// analysis reads them ([`crate::RowObserver`]).
pub fn analyze_with_op_tree_observed(
    store: &mut Store,
    cfg: &AnalyzeConfig,
    rules: &Rules,
    observer: Option<&mut dyn crate::RowObserver>,
) -> Result<(Analysis, OpTree)> {
    let mut out = None;
    let mut hook = |tree: &Tree,
                    items: &[Item],
                    acc: &Accumulated,
                    names: &Names,
                    scope: Option<(i64, i64)>| {
        out = Some(build(tree, items, acc, names, scope));
    };
    let analysis = analyze_inner(store, cfg, rules, Some(&mut hook), observer)?;
    let tree = out.unwrap_or(OpTree { nodes: Vec::new() });
    Ok((analysis, tree))
}
