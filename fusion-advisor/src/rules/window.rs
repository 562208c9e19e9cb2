//! Swin's window ops around the attention: LayerNorm + cyclic shift + pad + window partition,
//! and window reverse + reverse shift + residual (+ the next LayerNorm), each one pass.

use super::{needs_16bit, Ctx, Replacement, Verdict};
use crate::estimate::Kernel;

const SHIFT_ASSUMED: &str =
    "the roll's shift is not recorded: taken as window / 2, as Swin's shifted blocks use";

/// window / 2 when one of `steps` is a roll (recording that assumption), else 0.
fn shift_of(ctx: &Ctx, steps: &[usize], window: i64, assumptions: &mut Vec<String>) -> i64 {
    if steps.iter().any(|&s| ctx.base(s) == Some("roll")) {
        assumptions.push(SHIFT_ASSUMED.into());
        window / 2
    } else {
        0
    }
}

// window_partition | layer_norm (roll|pad|constant_pad_nd)? (roll|pad|constant_pad_nd)?
//                    (contiguous|reshape)
// timm rolls then pads; Hugging Face pads then rolls, on tokens [B, H*W, C] viewed as
// [B, H, W, C]; torchvision's partition copy is a reshape.
pub(super) fn partition(ctx: &Ctx) -> Verdict {
    let (Some(x), Some(win)) = (ctx.dims(0, 0), ctx.dims(3, 0)) else {
        return Verdict::NoMatch;
    };
    // x: [B, H, W, C], or tokens [B, H*W, C] whose grid the roll or pad between says; the
    // partition's permuted copy: [B, H/ws, W/ws, ws, ws, C].
    let grid = [1, 2].iter().find_map(|&s| match ctx.dims(s, 0) {
        Some(&[b, h, w, c]) => Some([b, h, w, c]),
        _ => None,
    });
    let [b, h, w, c] = match (x, grid) {
        (&[b, h, w, c], _) => [b, h, w, c],
        (&[b, l, c], Some([b2, h, w, c2])) if b2 == b && c2 == c && h * w == l => [b, h, w, c],
        _ => return Verdict::NoMatch,
    };
    let &[b2, nh, nw, ws, ws2, c2] = win else {
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
    let shift = shift_of(ctx, &[1, 2], ws, &mut assumptions);
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

// window_reverse | (contiguous|reshape) roll? add layer_norm?
pub(super) fn reverse(ctx: &Ctx) -> Verdict {
    let (Some(win), Some(x), Some(res)) = (ctx.dims(0, 0), ctx.dims(2, 0), ctx.dims(2, 1)) else {
        return Verdict::NoMatch;
    };
    // The reverse's permuted copy: [B, H/ws, ws, W/ws, ws, C]; the residual add on [B, H, W, C]
    // or, as Hugging Face adds it, on tokens [B, H*W, C] (then without padding to crop).
    let &[b2, nh, ws, nw, ws2, c2] = win else {
        return Verdict::NoMatch;
    };
    let [b, h, w, c] = match *x {
        [b, h, w, c] => [b, h, w, c],
        [b, l, c] if l == nh * ws * nw * ws2 => [b, nh * ws, nw * ws2, c],
        _ => return Verdict::NoMatch,
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
    let shift = shift_of(ctx, &[1], ws, &mut assumptions);
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
