//! The step's floor: the least GPU time one step could take if every op ran at the device's
//! ceilings and the step were fully fused, so that activations move through memory only where
//! the op sequence makes them, and how much of the measured step time sits above it, op by op.
//!
//! The model (also in `JSON.md`), per step and thread, over the outermost ops in launch order:
//! - Ops without GPU work are views and are skipped. An op with GPU work is *compute* (the
//!   [`headroom::estimate`] ops, convolutions and reductions), *layout* (copies, `contiguous`,
//!   `reshape`, `pad`, `roll`, `cat`, gathers such as `embedding` and `index`: a fused consumer
//!   reads through them, so they do no FLOPs and move no bytes of their own, except that a
//!   gather reads the rows it picks and its indices), or *unmodelled* / *without shapes*, which
//!   are left out (counted, with their time) and end the chain.
//! - FLOPs: each compute op's FLOPs from its shapes, at the tensor-core peak of its element
//!   type (16- and 8-bit: the 16-bit peak; 32-bit: half of it, TF32's rate).
//! - Bytes: parameters (the weight and bias of linear, addmm, convolution and norms) are read
//!   once per op. An op's activation input is *chained* when it is the output of the previous
//!   modelled op: same element count and size (views keep the count), or all of the op's
//!   activation inputs together make up that output (q, k and v split from one projection).
//!   A chained tensor stays on chip: neither written nor read. Any other activation input is
//!   read once; it is matched to the latest earlier output of the step with its element count
//!   and size that no other read has matched yet (else the latest such output), and if that
//!   output was kept on chip it is written once as well. No match: a model input, read once.
//!   An output that the next modelled op does not chain is written once (the step's outputs
//!   are written that way).
//! - Floor = max(FLOPs time, bytes / memory bandwidth) over the step (compute and memory
//!   overlap in a fused step). An op's share of the floor is its own term of the bound that
//!   sets it (its FLOPs time when compute sets the floor, its bytes' time when memory does);
//!   its gap is its measured GPU time minus its share.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::headroom::{self, Ceiling};

/// One outermost op instance as the floor reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct FloorOp<'a> {
    /// The step window it falls in (None: a run without steps).
    pub step: Option<usize>,
    pub thread: u32,
    pub start_ns: i64,
    /// Op type (`aten::linear`).
    pub name: &'a str,
    /// Input shapes, where recorded.
    pub dims: Option<&'a [Vec<i64>]>,
    /// Input dtypes, where recorded.
    pub dtypes: Option<&'a [String]>,
    /// Element size guessed from its kernels' names.
    pub elem_hint: Option<u32>,
    /// GPU records it launched (nested ops included) and their time.
    pub records: u64,
    pub gpu_ns: i64,
    pub module: Option<&'a str>,
}

/// The floor of a step (means over the steps in scope) and where the gap to it lies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepFloor {
    pub device: i64,
    /// Steps the figures are averaged over; 0: the run has no steps and the figures are per run.
    pub steps: usize,
    /// Measured GPU time per step (every record launched in the step).
    pub measured_ns: f64,
    /// GPU time per step of the ops the floor covers.
    pub covered_ns: f64,
    pub flops: f64,
    /// Bytes per step as the fused model moves them.
    pub fused_bytes: f64,
    /// Bytes per step if every covered op read its inputs and wrote its output itself.
    pub unfused_bytes: f64,
    /// FLOPs at the peaks, and fused bytes at the bandwidth, per step.
    pub compute_ns: f64,
    pub memory_ns: f64,
    /// `max(compute_ns, memory_ns)`.
    pub floor_ns: f64,
    /// `compute` or `memory`.
    pub bound: String,
    /// `floor_ns / measured_ns`; None when some GPU time was left out (see `left_out`).
    pub fraction: Option<f64>,
    /// `floor_ns / covered_ns`: what the covered ops reach.
    pub covered_fraction: f64,
    pub left_out: LeftOut,
    /// Op types by gap, largest first.
    pub by_op: Vec<FloorGap>,
    /// Module paths by gap, largest first (ops outside modules under `(no module)`).
    pub by_module: Vec<FloorGap>,
}

/// GPU time per step the floor does not cover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Ops with GPU work but no recorded input shapes (instances and time per step).
    pub no_shapes_ops: f64,
    pub no_shapes_ns: f64,
    /// Ops with shapes that the model does not cover.
    pub no_model_ops: f64,
    pub no_model_ns: f64,
    /// Their op types, most time first.
    pub no_model_names: Vec<String>,
    /// GPU time in the step that no op launched.
    pub outside_ops_ns: f64,
}

impl LeftOut {
    pub fn ns(&self) -> f64 {
        self.no_shapes_ns + self.no_model_ns + self.outside_ops_ns
    }
}

/// A group of ops (one type, or one module) against its share of the floor, per step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloorGap {
    pub name: String,
    pub instances: f64,
    pub measured_ns: f64,
    pub floor_ns: f64,
    /// `measured_ns - floor_ns`.
    pub gap_ns: f64,
}

/// The tensors of one modelled op, element counts.
#[derive(Clone, Debug, PartialEq)]
struct Tensors {
    /// Activation inputs (element counts), in argument order.
    acts: Vec<f64>,
    /// Parameter bytes.
    param_bytes: f64,
    /// Bytes read from sources that are not activations (the rows a gather picks, its indices).
    source_bytes: f64,
    out: f64,
    elem: f64,
    flops: f64,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Modelled(Tensors),
    NoShapes,
    NoModel,
}

/// Ops a fused consumer reads through: they do no arithmetic.
const LAYOUT: &[&str] = &[
    "contiguous",
    "clone",
    "copy",
    "to",
    "_to_copy",
    "reshape",
    "view",
    "permute",
    "transpose",
    "t",
    "flatten",
    "unflatten",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "select",
    "slice",
    "narrow",
    "unbind",
    "split",
    "chunk",
    "alias",
    "pad",
    "constant_pad_nd",
    "roll",
    "cat",
    "concat",
    "stack",
];
/// Layout ops that pick rows of a source by index: they read what they pick, and their indices.
const GATHERS: &[&str] = &["embedding", "index", "gather", "index_select"];
const REDUCTIONS: &[&str] = &[
    "mean",
    "sum",
    "amax",
    "amin",
    "max",
    "min",
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
    "adaptive_avg_pool1d",
];
const CONVS: &[&str] = &["conv1d", "conv2d", "conv3d", "convolution", "_convolution"];
const NORMS: &[&str] = &[
    "layer_norm",
    "native_layer_norm",
    "batch_norm",
    "native_batch_norm",
    "group_norm",
    "native_group_norm",
    "rms_norm",
    "_fused_rms_norm",
];

fn numel(d: &[i64]) -> f64 {
    d.iter().map(|&x| x.max(0) as f64).product()
}

/// Index tensors' element size: the recorded dtype, else int64 (PyTorch's index type).
fn index_elem(dtypes: Option<&[String]>, i: usize) -> f64 {
    dtypes
        .and_then(|t| t.get(i))
        .and_then(|t| headroom::dtype_bytes(t))
        .unwrap_or(8) as f64
}

/// The model of one op; `next_input` is the first input shape of the op after it on its thread
/// (the output size of a convolution or reduction, whose arguments the trace does not keep).
fn kind(op: &FloorOp<'_>, next_input: Option<&[i64]>) -> Kind {
    let Some(dims) = op.dims else {
        return Kind::NoShapes;
    };
    let base = op.name.rsplit("::").next().unwrap_or(op.name);
    let base = if base.ends_with('_') && !base.starts_with('_') {
        base.trim_end_matches('_')
    } else {
        base
    };
    let tensors: Vec<&[i64]> = dims
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| d.as_slice())
        .collect();
    let d = |i: usize| dims.get(i).map(|v| v.as_slice()).unwrap_or(&[]);
    let elem = op
        .dtypes
        .and_then(|t| t.first())
        .and_then(|t| headroom::dtype_bytes(t))
        .or(op.elem_hint)
        .unwrap_or(2) as f64;
    if GATHERS.contains(&base) {
        // embedding(table, indices), index(source, indices), gather(source, dim, index),
        // index_select(source, dim, index): the output is as many rows as indices.
        let (src, idx, i_idx) = match base {
            "embedding" => (d(0), d(1), 1),
            "index" => (d(0), d(1), 1),
            _ => (d(0), d(2), 2),
        };
        if src.is_empty() || idx.is_empty() {
            return Kind::NoModel;
        }
        let out = match base {
            "gather" => numel(idx),
            "embedding" => numel(idx) * numel(&src[1..]),
            "index" => numel(idx) * numel(&src[1..]),
            // index_select along an unrecorded dim: the next op's input is its output.
            _ => match next_input {
                Some(n) => numel(n),
                None => return Kind::NoModel,
            },
        };
        return Kind::Modelled(Tensors {
            acts: Vec::new(),
            param_bytes: 0.0,
            source_bytes: out * elem + numel(idx) * index_elem(op.dtypes, i_idx),
            out,
            elem,
            flops: 0.0,
        });
    }
    if LAYOUT.contains(&base) {
        let Some(first) = tensors.first() else {
            return Kind::NoModel;
        };
        let (acts, out) = match base {
            "cat" | "concat" | "stack" => {
                let acts: Vec<f64> = tensors.iter().map(|t| numel(t)).collect();
                let out = acts.iter().sum();
                (acts, out)
            }
            // copy_(dst, src) overwrites dst: it reads src only.
            "copy" if tensors.len() >= 2 => (vec![numel(tensors[1])], numel(tensors[1])),
            _ => (vec![numel(first)], numel(first)),
        };
        return Kind::Modelled(Tensors {
            acts,
            param_bytes: 0.0,
            source_bytes: 0.0,
            out,
            elem,
            flops: 0.0,
        });
    }
    if CONVS.contains(&base) {
        let (x, w) = (d(0), d(1));
        if x.len() < 3 || w.len() != x.len() {
            return Kind::NoModel;
        }
        let (n, c_out, spatial_in) = (x[0] as f64, w[0] as f64, numel(&x[2..]));
        // The output's spatial size: the next op's input where it is an N x C_out x S tensor
        // with S no larger than the input's (stride >= 1), else the input's (stride 1).
        let spatial = next_input
            .map(|t| numel(t) / (n * c_out))
            .filter(|s| s.fract() == 0.0 && *s >= 1.0 && *s <= spatial_in)
            .unwrap_or(spatial_in);
        let out = n * c_out * spatial;
        let bias = numel(d(2)) * f64::from(!d(2).is_empty());
        return Kind::Modelled(Tensors {
            acts: vec![numel(x)],
            param_bytes: (numel(w) + bias) * elem,
            source_bytes: 0.0,
            out,
            elem,
            flops: 2.0 * out * numel(&w[1..]),
        });
    }
    if REDUCTIONS.contains(&base) {
        let x = d(0);
        let out = next_input.map(numel).filter(|&o| o < numel(x) && o >= 1.0);
        let (Some(out), false) = (out, x.is_empty()) else {
            return Kind::NoModel;
        };
        return Kind::Modelled(Tensors {
            acts: vec![numel(x)],
            param_bytes: 0.0,
            source_bytes: 0.0,
            out,
            elem,
            flops: numel(x),
        });
    }
    let Some(est) = headroom::estimate(op.name, dims, op.dtypes, op.elem_hint) else {
        return Kind::NoModel;
    };
    let elem = est.elem_bytes as f64;
    // Which inputs are parameters, and the output's element count.
    let (params, out): (&[usize], f64) = match base {
        "linear" => {
            let (a, b) = (d(0), d(1));
            (&[1, 2], numel(&a[..a.len() - 1]) * b[0] as f64)
        }
        "addmm" => (&[0, 2], d(1)[0] as f64 * d(2)[1] as f64),
        "mm" => (&[], d(0)[0] as f64 * d(1)[1] as f64),
        "bmm" => (&[], d(0)[0] as f64 * d(0)[1] as f64 * d(1)[2] as f64),
        "baddbmm" => (&[], d(1)[0] as f64 * d(1)[1] as f64 * d(2)[2] as f64),
        // The estimate's FLOPs are 2 x (output elements) x K for a matrix product.
        "matmul" => (&[], est.flops / (2.0 * *d(0).last().unwrap_or(&1) as f64)),
        "scaled_dot_product_attention" => {
            let (q, v) = (d(0), d(2));
            (
                &[],
                numel(&q[..q.len() - 1]) * *v.last().unwrap_or(&1) as f64,
            )
        }
        b if NORMS.contains(&b) => (&[1, 2, 3, 4], numel(d(0))),
        // Elementwise ops: the output takes the largest input's shape (broadcast).
        _ => (&[], tensors.iter().map(|t| numel(t)).fold(0.0, f64::max)),
    };
    let mut acts = Vec::new();
    let mut param_bytes = 0.0;
    for (i, t) in dims.iter().enumerate() {
        if t.is_empty() {
            continue;
        }
        // The masks of scaled_dot_product_attention and the like are read as activations.
        if params.contains(&i) {
            param_bytes += numel(t) * elem;
        } else {
            acts.push(numel(t));
        }
    }
    Kind::Modelled(Tensors {
        acts,
        param_bytes,
        source_bytes: 0.0,
        out,
        elem,
        flops: est.flops,
    })
}

/// FLOP/s for an element size: 16- and 8-bit at the 16-bit tensor-core peak, 32-bit at half of
/// it (TF32), none for 64-bit.
fn peak(c: &Ceiling, elem: f64) -> Option<f64> {
    match elem as u32 {
        1 | 2 => Some(c.flops_16bit_per_s),
        4 => Some(c.flops_16bit_per_s / 2.0),
        _ => None,
    }
}

/// What the fused model charges one op instance.
#[derive(Clone, Debug, Default, PartialEq)]
struct Charge {
    bytes: f64,
    unfused: f64,
    flops_s: f64,
    flops: f64,
}

/// An output of the step so far.
struct Produced {
    numel: f64,
    elem: f64,
    /// Index of its op in the charges.
    op: usize,
    written: bool,
    /// A read from memory has matched it.
    read: bool,
    /// Written and read in equal parts of this many elements (0: whole), and parts not read.
    piece: f64,
    pieces_left: f64,
}

/// The floor of `ops` (every outermost op in scope, any order) against `ceiling`;
/// `measured_ns`: the GPU time of every record in scope; `steps`: how many steps that is
/// (0: the run has no steps). None when no op could be modelled.
pub fn step_floor(
    ops: &[FloorOp<'_>],
    ceiling: &Ceiling,
    measured_ns: i64,
    steps: usize,
) -> Option<StepFloor> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (ops[i].step, ops[i].thread, ops[i].start_ns));
    let mut charges = vec![Charge::default(); ops.len()];
    let mut kinds: Vec<Option<Kind>> = vec![None; ops.len()];
    let mut left = LeftOut::default();
    let mut no_model: HashMap<&str, i64> = HashMap::new();
    let mut start = 0;
    while start < order.len() {
        // One step of one thread.
        let key = |i: usize| (ops[i].step, ops[i].thread);
        let end = start + order[start..].partition_point(|&i| key(i) == key(order[start]));
        let seq = &order[start..end];
        let mut produced: Vec<Produced> = Vec::new();
        // The previous modelled op's output, while the chain runs.
        let mut prev: Option<usize> = None;
        for (pos, &i) in seq.iter().enumerate() {
            let op = &ops[i];
            if op.records == 0 {
                continue;
            }
            let next_input = seq[pos + 1..]
                .first()
                .and_then(|&j| ops[j].dims)
                .and_then(|d| d.iter().find(|t| !t.is_empty()))
                .map(|t| t.as_slice());
            let k = kind(op, next_input);
            let t = match &k {
                Kind::Modelled(t) => t.clone(),
                Kind::NoShapes | Kind::NoModel => {
                    if matches!(k, Kind::NoShapes) {
                        left.no_shapes_ops += 1.0;
                        left.no_shapes_ns += op.gpu_ns as f64;
                    } else {
                        left.no_model_ops += 1.0;
                        left.no_model_ns += op.gpu_ns as f64;
                        *no_model.entry(op.name).or_default() += op.gpu_ns;
                    }
                    // The chain ends here: the previous output goes to memory.
                    if let Some(p) = prev.take() {
                        write(&mut produced[p], &mut charges);
                    }
                    kinds[i] = Some(k);
                    continue;
                }
            };
            kinds[i] = Some(k);
            let c = &mut charges[i];
            c.flops = t.flops;
            c.unfused =
                (t.acts.iter().sum::<f64>() + t.out) * t.elem + t.param_bytes + t.source_bytes;
            c.bytes = t.param_bytes + t.source_bytes;
            c.flops_s = match peak(ceiling, t.elem) {
                Some(p) => t.flops / p,
                None => 0.0,
            };
            // Which activation inputs come straight from the previous modelled op.
            let mut chained = vec![false; t.acts.len()];
            let mut from_chain = None;
            if let Some(p) = prev.take() {
                let pr = &produced[p];
                let same = |n: f64| n == pr.numel && t.elem == pr.elem;
                if let Some(j) = t.acts.iter().position(|&n| same(n)) {
                    chained[j] = true;
                } else if t.acts.len() > 1 && same(t.acts.iter().sum()) {
                    chained.iter_mut().for_each(|c| *c = true);
                }
                if chained.contains(&true) {
                    from_chain = Some(p);
                } else {
                    write(&mut produced[p], &mut charges);
                    // An input that is an equal part of it (q of a fused qkv projection): the
                    // output is taken as split into parts of that size, read one by one.
                    let pr = &mut produced[p];
                    if let Some(&n) = t.acts.iter().find(|&&n| {
                        n < pr.numel && (pr.numel / n).fract() == 0.0 && t.elem == pr.elem
                    }) {
                        pr.piece = n;
                        pr.pieces_left = pr.numel / n;
                    }
                }
            }
            for (j, &n) in t.acts.iter().enumerate() {
                if chained[j] {
                    continue;
                }
                // Read from memory: the latest earlier output of this size that no read has
                // matched yet, else the latest of this size (never the one just chained).
                charges[i].bytes += n * t.elem;
                if let Some(q) = produced
                    .iter_mut()
                    .rev()
                    .find(|q| q.piece == n && q.pieces_left >= 1.0 && q.elem == t.elem)
                {
                    q.pieces_left -= 1.0;
                    continue;
                }
                let fits = |m: usize, q: &Produced| {
                    Some(m) != from_chain && q.numel == n && q.elem == t.elem
                };
                let found = (0..produced.len())
                    .rev()
                    .find(|&m| fits(m, &produced[m]) && !produced[m].read)
                    .or_else(|| (0..produced.len()).rev().find(|&m| fits(m, &produced[m])));
                if let Some(m) = found {
                    produced[m].read = true;
                    write(&mut produced[m], &mut charges);
                }
            }
            produced.push(Produced {
                numel: t.out,
                elem: t.elem,
                op: i,
                written: false,
                read: false,
                piece: 0.0,
                pieces_left: 0.0,
            });
            prev = Some(produced.len() - 1);
        }
        // The step's last output goes to memory.
        if let Some(p) = prev {
            write(&mut produced[p], &mut charges);
        }
        start = end;
    }

    let modelled: Vec<usize> = (0..ops.len())
        .filter(|&i| matches!(kinds[i], Some(Kind::Modelled(_))))
        .collect();
    if modelled.is_empty() {
        return None;
    }
    let n = steps.max(1) as f64;
    let covered: i64 = modelled.iter().map(|&i| ops[i].gpu_ns).sum();
    let all_ops: i64 = ops.iter().map(|o| o.gpu_ns).sum();
    left.outside_ops_ns = (measured_ns - all_ops).max(0) as f64;
    let flops: f64 = modelled.iter().map(|&i| charges[i].flops).sum();
    let bytes: f64 = modelled.iter().map(|&i| charges[i].bytes).sum();
    let unfused: f64 = modelled.iter().map(|&i| charges[i].unfused).sum();
    let compute_s: f64 = modelled.iter().map(|&i| charges[i].flops_s).sum();
    let memory_s = bytes / ceiling.mem_bytes_per_s;
    let compute_bound = compute_s >= memory_s;
    let share = |i: usize| {
        1e9 * if compute_bound {
            charges[i].flops_s
        } else {
            charges[i].bytes / ceiling.mem_bytes_per_s
        }
    };
    let group = |key: &dyn Fn(usize) -> String| -> Vec<FloorGap> {
        let mut g: HashMap<String, FloorGap> = HashMap::new();
        for &i in &modelled {
            let e = g.entry(key(i)).or_insert_with_key(|k| FloorGap {
                name: k.clone(),
                instances: 0.0,
                measured_ns: 0.0,
                floor_ns: 0.0,
                gap_ns: 0.0,
            });
            e.instances += 1.0;
            e.measured_ns += ops[i].gpu_ns as f64;
            e.floor_ns += share(i);
        }
        let mut v: Vec<FloorGap> = g
            .into_values()
            .map(|mut r| {
                r.instances /= n;
                r.measured_ns /= n;
                r.floor_ns /= n;
                r.gap_ns = r.measured_ns - r.floor_ns;
                r
            })
            .collect();
        v.sort_by(|a, b| {
            b.gap_ns
                .total_cmp(&a.gap_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        v
    };
    let mut by_op = group(&|i| ops[i].name.to_string());
    let mut by_module = group(&|i| ops[i].module.unwrap_or("(no module)").to_string());
    let mut names: Vec<(&str, i64)> = no_model.into_iter().collect();
    names.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
    left.no_model_names = names.into_iter().map(|(s, _)| s.to_string()).collect();
    // Rounded as the document prints them (ns to 2 decimals, fractions to 6, counts whole),
    // so that the JSON reads back to the same values.
    let r2 = |x: f64| (x * 100.0).round() / 100.0;
    let r6 = |x: f64| (x * 1e6).round() / 1e6;
    for g in by_op.iter_mut().chain(by_module.iter_mut()) {
        g.instances = r2(g.instances);
        g.measured_ns = r2(g.measured_ns);
        g.floor_ns = r2(g.floor_ns);
        g.gap_ns = r2(g.gap_ns);
    }
    left.no_shapes_ops = r2(left.no_shapes_ops / n);
    left.no_shapes_ns = r2(left.no_shapes_ns / n);
    left.no_model_ops = r2(left.no_model_ops / n);
    left.no_model_ns = r2(left.no_model_ns / n);
    left.outside_ops_ns = r2(left.outside_ops_ns / n);
    let floor_ns = compute_s.max(memory_s) * 1e9 / n;
    let measured = measured_ns as f64 / n;
    let covered_ns = covered as f64 / n;
    Some(StepFloor {
        device: ceiling.device,
        steps,
        measured_ns: r2(measured),
        covered_ns: r2(covered_ns),
        flops: (flops / n).round(),
        fused_bytes: (bytes / n).round(),
        unfused_bytes: (unfused / n).round(),
        compute_ns: r2(compute_s * 1e9 / n),
        memory_ns: r2(memory_s * 1e9 / n),
        floor_ns: r2(floor_ns),
        bound: if compute_bound { "compute" } else { "memory" }.into(),
        fraction: (left.ns() == 0.0 && measured > 0.0).then(|| r6(floor_ns / measured)),
        covered_fraction: if covered_ns > 0.0 {
            r6(floor_ns / covered_ns)
        } else {
            0.0
        },
        left_out: left,
        by_op,
        by_module,
    })
}

/// Writes `p` to memory once, charging its producer.
fn write(p: &mut Produced, charges: &mut [Charge]) {
    if !p.written {
        p.written = true;
        charges[p.op].bytes += p.numel * p.elem;
    }
}

/// The floor of the analysis in scope, from the operator tree and the attributed records:
/// `window`: the one step in scope (`step` its index), else every step window of `windows`
/// (none: the whole run). `notes` says why there is none where that is not obvious.
#[allow(clippy::too_many_arguments)]
pub(crate) fn from_tree(
    tree: &crate::ops::Tree,
    names: &crate::ops::Names,
    items: &[crate::attribution::Item],
    windows: &[crate::steps::Window],
    window: Option<(usize, crate::steps::Window)>,
    devices: &[i64],
    ceilings: &[Ceiling],
    notes: &mut Vec<String>,
) -> Option<StepFloor> {
    use crate::ops::{Role, NONE};
    if devices.len() != 1 {
        if devices.len() > 1 {
            notes.push(format!(
                "no step floor: the run's GPU work is on {} devices, and the floor models one",
                devices.len()
            ));
        }
        return None;
    }
    // Without ceilings, the headroom note already says so.
    let ceiling = ceilings.iter().find(|c| c.device == devices[0])?;
    // The step a time falls in: Some(None) for a run without steps, None out of scope.
    let step_at = |t: i64| -> Option<Option<usize>> {
        match window {
            Some((k, w)) => (t >= w.start_ns && t < w.end_ns).then_some(Some(k)),
            None if windows.is_empty() => Some(None),
            None => {
                let i = windows.partition_point(|w| w.start_ns <= t);
                (i > 0 && t < windows[i - 1].end_ns).then(|| Some(i - 1))
            }
        }
    };
    // The outermost op above each range (parents come before their children).
    let n = tree.ranges.len();
    let mut outer = vec![NONE; n];
    for i in 0..n {
        let p = tree.parent[i];
        let up = if p == NONE { NONE } else { outer[p as usize] };
        outer[i] = if up == NONE && tree.ranges[i].role() == Role::Op {
            i as u32
        } else {
            up
        };
    }
    // GPU time, records and first kernel name of each outermost op, over the records in scope.
    let mut gpu = vec![0i64; n];
    let mut records = vec![0u64; n];
    let mut hint: Vec<Option<u32>> = vec![None; n];
    let mut measured = 0;
    for it in items {
        if step_at(it.launch_ns).is_none() {
            continue;
        }
        measured += it.dur_ns;
        if it.owner == NONE {
            continue;
        }
        let o = outer[it.owner as usize];
        if o == NONE {
            continue;
        }
        gpu[o as usize] += it.dur_ns;
        records[o as usize] += 1;
        if hint[o as usize].is_none() {
            hint[o as usize] = headroom::dtype_bytes_from_kernel(names.get(it.name));
        }
    }
    let (module_of, modules) = crate::hotspots::module_ids(tree);
    let mut dims_of: HashMap<u32, Option<Vec<Vec<i64>>>> = HashMap::new();
    let mut types_of: HashMap<u32, Option<Vec<String>>> = HashMap::new();
    let mut module_path: HashMap<u32, String> = HashMap::new();
    let mut picked = Vec::new();
    for (i, r) in tree.ranges.iter().enumerate() {
        if outer[i] != i as u32 {
            continue;
        }
        let Some(step) = step_at(r.start_ns) else {
            continue;
        };
        if r.dims != NONE {
            dims_of
                .entry(r.dims)
                .or_insert_with(|| crate::ops::parse_dims(names.get(r.dims)));
        }
        if r.types != NONE {
            types_of
                .entry(r.types)
                .or_insert_with(|| crate::ops::parse_types(names.get(r.types)));
        }
        let m = module_of[i];
        if m != 0 {
            module_path
                .entry(m)
                .or_insert_with(|| modules.path(names, m));
        }
        picked.push((i, step));
    }
    let ops: Vec<FloorOp<'_>> = picked
        .iter()
        .map(|&(i, step)| {
            let r = &tree.ranges[i];
            FloorOp {
                step,
                thread: r.thread(),
                start_ns: r.start_ns,
                name: names.get(r.name),
                dims: dims_of.get(&r.dims).and_then(|d| d.as_deref()),
                dtypes: types_of.get(&r.types).and_then(|t| t.as_deref()),
                elem_hint: hint[i],
                records: records[i],
                gpu_ns: gpu[i],
                module: module_path.get(&module_of[i]).map(|s| s.as_str()),
            }
        })
        .collect();
    let steps = match window {
        Some(_) => 1,
        None => windows.len(),
    };
    step_floor(&ops, ceiling, measured, steps)
}
