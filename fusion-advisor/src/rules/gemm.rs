//! GEMMs: odd sizes padded to multiples of 8 (weights padded once), the GEMM + bias + GELU and
//! GEMM + bias + residual epilogues, and a lone bias + residual add.

use super::{needs_16bit, rows, Ctx, Replacement, Verdict};
use crate::estimate::Kernel;

pub(super) const GELU_ASSUMED: &str =
    "GELU's `approximate` argument is not recorded: taken as 'none' \
                            (exact erf, nn.GELU's default); a tanh GELU is not replaced";

/// (M, N, K) of a linear `[..., K] x [N, K]^T`, with its bias present or not.
pub(super) fn linear_mnk(ctx: &Ctx, step: usize) -> Option<(i64, i64, i64, bool)> {
    let x = ctx.dims(step, 0)?;
    let w = ctx.dims(step, 1)?;
    let (&k, &[n, k2]) = (x.last()?, w) else {
        return None;
    };
    (k == k2).then(|| (rows(x), n, k, ctx.dims(step, 2).is_some()))
}

fn aligned(n: i64, k: i64) -> bool {
    n % 8 == 0 && k % 8 == 0
}

fn epilogue(ctx: &Ctx, residual: bool) -> Verdict {
    let Some((m, n, k, bias)) = linear_mnk(ctx, 0) else {
        return Verdict::NoMatch;
    };
    let Some(out) = ctx.dims(1, 0) else {
        return Verdict::NoMatch;
    };
    // The elementwise op works on the linear's output [..., N].
    if out.last() != Some(&n) || rows(out) != m {
        return Verdict::NoMatch;
    }
    if residual && ctx.dims(1, 1) != Some(out) {
        // A broadcast add (a bias, a position embedding) is not a residual.
        return Verdict::NoMatch;
    }
    if !aligned(n, k) {
        // Odd sizes go to the padded GEMM; the elementwise op stays.
        return Verdict::NoMatch;
    }
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    if !bias {
        return Verdict::NotProposed(
            "a linear without bias: the bundled epilogues are bias + GELU and bias + residual"
                .into(),
        );
    }
    if !residual {
        assumptions.push(GELU_ASSUMED.into());
    }
    let (kernel, call) = if residual {
        (
            Kernel::GemmResidual { m, n, k },
            format!(
                "y = fk.gemm(x, fc.weight, \"nk\", bias=fc.bias, residual=shortcut, \
                 epilogue=\"bias_residual\")  # [{m}, {k}] x [{n}, {k}]^T + residual"
            ),
        )
    } else {
        (
            Kernel::GemmGelu { m, n, k },
            format!(
                "h = fk.gemm(x, fc1.weight, \"nk\", bias=fc1.bias, epilogue=\"bias_gelu\")  \
                 # [{m}, {k}] x [{n}, {k}]^T, exact GELU"
            ),
        )
    };
    Verdict::Replace(Replacement {
        kernel,
        shape: format!("{m}x{n}x{k}"),
        call,
        params: vec![("m", m), ("n", n), ("k", k)],
        assumptions,
    })
}

// gemm_gelu | linear gelu
pub(super) fn gelu(ctx: &Ctx) -> Verdict {
    epilogue(ctx, false)
}

// gemm_residual | linear add
pub(super) fn residual(ctx: &Ctx) -> Verdict {
    epilogue(ctx, true)
}

// bias_residual | add add
pub(super) fn bias_residual(ctx: &Ctx) -> Verdict {
    let (Some(x), Some(bias), Some(a), Some(b)) = (
        ctx.dims(0, 0),
        ctx.dims(0, 1),
        ctx.dims(1, 0),
        ctx.dims(1, 1),
    ) else {
        return Verdict::NoMatch;
    };
    let cols = *x.last().unwrap_or(&0);
    if bias != [cols] || a != x || b != x || x.len() < 2 {
        return Verdict::NoMatch;
    }
    let assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    let r = rows(x);
    Verdict::Replace(Replacement {
        kernel: Kernel::BiasResidual { rows: r, cols },
        shape: format!("{r}x{cols}"),
        call: format!("y = fk.bias_residual(x, bias, shortcut)  # [{r}, {cols}]"),
        params: vec![("rows", r), ("cols", cols)],
        assumptions,
    })
}

// odd_gemm | (linear|addmm|mm|bmm|matmul|baddbmm)
pub(super) fn odd(ctx: &Ctx) -> Verdict {
    let Some(op) = ctx.op(0) else {
        return Verdict::NoMatch;
    };
    let d = |i| ctx.dims(0, i);
    // (batch, M, N, K, B is a weight)
    let shape = match op.base_name() {
        "linear" => linear_mnk(ctx, 0).map(|(m, n, k, _)| (1, m, n, k, true)),
        "addmm" => match (d(1), d(2)) {
            (Some(&[m, k]), Some(&[k2, n])) if k == k2 => Some((1, m, n, k, false)),
            _ => None,
        },
        "mm" => match (d(0), d(1)) {
            (Some(&[m, k]), Some(&[k2, n])) if k == k2 => Some((1, m, n, k, false)),
            _ => None,
        },
        "bmm" | "baddbmm" => {
            let o = usize::from(op.base_name() == "baddbmm");
            match (d(o), d(o + 1)) {
                (Some(&[b, m, k]), Some(&[b2, k2, n])) if b == b2 && k == k2 => {
                    Some((b, m, n, k, false))
                }
                _ => None,
            }
        }
        "matmul" => match (d(0), d(1)) {
            (Some(a), Some(&[k2, n])) if a.len() >= 2 && a[a.len() - 1] == k2 => {
                Some((1, rows(a), n, k2, true))
            }
            (Some(a), Some(bm)) if a.len() >= 3 && a.len() == bm.len() => {
                let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
                let (k2, n) = (bm[bm.len() - 2], bm[bm.len() - 1]);
                (k == k2).then(|| (a[..a.len() - 2].iter().product(), m, n, k, false))
            }
            _ => None,
        },
        _ => None,
    };
    let Some((batch, m, n, k, b_is_weight)) = shape else {
        return Verdict::NoMatch;
    };
    // Row-major operands need N and K (their leading dimensions) in multiples of 8 elements
    // for the tensor cores' 16-byte loads; M does not matter.
    if aligned(n, k) {
        return Verdict::NoMatch;
    }
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    let (np, kp) = ((n + 7) / 8 * 8, (k + 7) / 8 * 8);
    // Activations are padded on every call: A when K is odd; B too when it is not a weight.
    let mut pad_elems = 0;
    if kp != k {
        pad_elems += batch * m * (k + kp);
    }
    if !b_is_weight && (kp != k || np != n) {
        pad_elems += batch * (k * n + kp * np);
    }
    if np != n {
        assumptions.push(format!(
            "the output is a [{m}, {np}] buffer read as [{m}, {n}] (a strided view of the \
             padded columns)"
        ));
    }
    let weight_note = if b_is_weight {
        format!("w_pad = fk.pad(weight, rows_to={np}, cols_to={kp})  # once, at load time\n")
    } else {
        String::new()
    };
    Verdict::Replace(Replacement {
        kernel: Kernel::PaddedGemm {
            batch,
            m,
            n: np,
            k: kp,
            pad_bytes: pad_elems * 2,
        },
        shape: format!(
            "{}{m}x{n}x{k} -> {np}x{kp}",
            if batch > 1 {
                format!("{batch}x")
            } else {
                String::new()
            }
        ),
        call: format!(
            "{weight_note}y = fk.gemm(a, {}, \"{}\")  # operands padded to N {np}, K {kp}",
            if b_is_weight { "w_pad" } else { "b_pad" },
            if b_is_weight { "nk" } else { "kn" }
        ),
        params: vec![
            ("batch", batch),
            ("m", m),
            ("n", n),
            ("k", k),
            ("b_is_weight", i64::from(b_is_weight)),
        ],
        assumptions,
    })
}
