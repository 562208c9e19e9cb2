//! Swin's window ops around the attention: LayerNorm + cyclic shift + pad + window partition,
//! and window reverse + reverse shift + residual (+ the next LayerNorm), each one pass.

use super::{needs_16bit, Ctx, Replacement, Verdict};
use crate::estimate::Kernel;

const SHIFT_ASSUMED: &str =
    "the roll's shift is not recorded: taken as window / 2, as Swin's shifted blocks use";

fn shift_of(ctx: &Ctx, roll_step: usize, window: i64, assumptions: &mut Vec<String>) -> i64 {
    if ctx.op(roll_step).is_some() {
        assumptions.push(SHIFT_ASSUMED.into());
        window / 2
    } else {
        0
    }
}

// window_partition | layer_norm roll? pad? contiguous
pub(super) fn partition(ctx: &Ctx) -> Verdict {
    let (Some(x), Some(win)) = (ctx.dims(0, 0), ctx.dims(3, 0)) else {
        return Verdict::NoMatch;
    };
    // x: [B, H, W, C]; the partition's permuted copy: [B, H/ws, W/ws, ws, ws, C].
    let (&[b, h, w, c], &[b2, nh, nw, ws, ws2, c2]) = (x, win) else {
        return Verdict::NoMatch;
    };
    if b2 != b || c2 != c || ws != ws2 || nh * ws < h || nw * ws < w {
        return Verdict::NoMatch;
    }
    if ctx.dims(0, 2).is_some_and(|g| g != [c]) {
        return Verdict::NotProposed("a LayerNorm over more than the channels".into());
    }
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    let shift = shift_of(ctx, 1, ws, &mut assumptions);
    Verdict::Replace(Replacement {
        kernel: Kernel::LnPartition {
            b,
            h,
            w,
            c,
            window: ws,
        },
        shape: format!(
            "{b}x{h}x{w}x{c}, window {ws}{}",
            if shift > 0 { ", shifted" } else { "" }
        ),
        call: format!(
            "windows = fk.ln_shift_partition(x, norm1.weight, norm1.bias, window={ws}, \
             shift={shift})  # x: [{b}, {h}, {w}, {c}] -> [{}, {}, {c}]",
            b * nh * nw,
            ws * ws
        ),
        params: vec![
            ("b", b),
            ("h", h),
            ("w", w),
            ("c", c),
            ("window", ws),
            ("shift", shift),
        ],
        assumptions,
    })
}

// window_reverse | contiguous roll? add layer_norm?
pub(super) fn reverse(ctx: &Ctx) -> Verdict {
    let (Some(win), Some(x), Some(res)) = (ctx.dims(0, 0), ctx.dims(2, 0), ctx.dims(2, 1)) else {
        return Verdict::NoMatch;
    };
    // The reverse's permuted copy: [B, H/ws, ws, W/ws, ws, C]; the residual add on [B, H, W, C].
    let (&[b2, nh, ws, nw, ws2, c2], &[b, h, w, c]) = (win, x) else {
        return Verdict::NoMatch;
    };
    if x != res || b2 != b || c2 != c || ws != ws2 || nh * ws < h || nw * ws < w {
        return Verdict::NoMatch;
    }
    let with_ln = match ctx.dims(3, 0) {
        None => false,
        Some(d) if d.last() == Some(&c) && d.iter().product::<i64>() == b * h * w * c => true,
        Some(_) => return Verdict::NoMatch,
    };
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    let shift = shift_of(ctx, 1, ws, &mut assumptions);
    Verdict::Replace(Replacement {
        kernel: Kernel::WindowReverse {
            b,
            h,
            w,
            c,
            window: ws,
            with_ln,
        },
        shape: format!(
            "{b}x{h}x{w}x{c}, window {ws}{}{}",
            if shift > 0 { ", shifted" } else { "" },
            if with_ln { ", + LayerNorm" } else { "" }
        ),
        call: if with_ln {
            format!(
                "x, x_ln = fk.window_reverse_residual(attn_windows, shortcut, {ws}, {shift}, \
                 gamma=norm2.weight, beta=norm2.bias, with_ln=True)  # -> [{b}, {h}, {w}, {c}] twice"
            )
        } else {
            format!(
                "x = fk.window_reverse_residual(attn_windows, shortcut, {ws}, {shift})  \
                 # -> [{b}, {h}, {w}, {c}]"
            )
        },
        params: vec![
            ("b", b),
            ("h", h),
            ("w", w),
            ("c", c),
            ("window", ws),
            ("shift", shift),
            ("with_ln", i64::from(with_ln)),
        ],
        assumptions,
    })
}
