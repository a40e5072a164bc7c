//! The rules beside the cost model, each measured on the H200 and naming
//! its evidence, over ranges of operator, dtype, row length, row count,
//! bytes against the L2 and multiprocessors: never one exact shape (an
//! exact shape's winner is data, in `tuning/h200.json`).
//!
//! - [`VARIANT_LADDERS`]: the variants an automatic request takes.
//! - The layout rules, tried in this order where no tuning entry covers
//!   the problem: [`few_rows_narrower_instead`],
//!   [`tiny_rows_one_thread_instead`],
//!   [`whole_row_stream_instead`], [`hinted_stream_instead`],
//!   [`early_columns_instead`]; then
//!   [`one_row_per_multiprocessor`] on whatever replaced the model's pick.
//! - [`scalar_pack_too_wide`] narrows the model's space;
//!   [`occupancy_step_to_try`] judges an occupancy promise once the
//!   compiler's register count is known.

use super::model::{model_choice, ModelChoice};
use crate::enumeration::Legal;
use crate::layout::vector_access;
use crate::legality::{
    groups_by_shared_memory, groups_per_multiprocessor, plan_rows, register_budget,
    with_cluster_group_threads, BASE_REGISTERS,
};
use crate::mapper::{LayoutRequest, Plan, Problem, Residency, ResidencyRequest};
use crate::shape::Shape;
use crate::target::Target;
use crate::tuned::Span;
use lanefold_ir::{DType, Operator};
use std::sync::OnceLock;

/// Storage dtypes a rung covers.
#[derive(Clone, Copy, Debug)]
enum Dtypes {
    Any,
    F32,
    /// bf16 and f16.
    Bits16,
    F32OrBf16,
}

impl Dtypes {
    fn contain(self, dtype: DType) -> bool {
        match self {
            Dtypes::Any => true,
            Dtypes::F32 => dtype == DType::F32,
            Dtypes::Bits16 => dtype.size_bytes() == 2,
            Dtypes::F32OrBf16 => matches!(dtype, DType::F32 | DType::Bf16),
        }
    }
}

/// Every schedule token the ladders add.
#[cfg(test)]
pub(super) fn ladder_tokens() -> impl Iterator<Item = &'static str> {
    VARIANT_LADDERS
        .iter()
        .flat_map(|Rung(.., adds)| adds.split_whitespace())
}

/// What a rung asks of the rows. Anything but `Any` and `Misaligned`
/// depends on the row count, so a batch-invariant request skips the rung.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rows {
    Any,
    /// Rows no pack reads as 16-byte vectors (N not a multiple of 16 bytes'
    /// elements: every row after the first starts off a 16-byte boundary).
    Misaligned,
    /// [`Rows::Misaligned`] rows read in aligned packs, each row's layout
    /// shifted by its position: a batch-invariant request skips the rung.
    Shifted,
    /// [`Rows::Shifted`], at least as many as multiprocessors.
    ShiftedAtLeastSms,
    /// [`Rows::ShiftedAtLeastSms`] rows of a length no multiple of 4
    /// elements, so that no 4-element pack is a vector (16 bytes in f32,
    /// 8 in 16-bit).
    ShiftedOffFourAtLeastSms,
    /// Fewer rows than multiprocessors: each row alone on its SM, its time
    /// its latency.
    FewerThanSms,
    /// [`Rows::Shifted`], fewer than multiprocessors.
    ShiftedFewerThanSms,
    /// Rows that all start on 16-byte boundaries, fewer than
    /// multiprocessors.
    AlignedFewerThanSms,
    /// A rows x N tile of at least [`PAST_L2_BYTES`].
    PastL2,
    /// [`Rows::PastL2`] rows that all start on 16-byte boundaries.
    AlignedPastL2,
}

/// One rung of a ladder: the operators, dtypes, row lengths (inclusive)
/// and row counts where the automatic request takes the schedule tokens
/// of its last field.
#[derive(Debug)]
pub(super) struct Rung(&'static [Operator], Dtypes, Span, Rows, &'static str);

const fn from(min: usize) -> Span {
    Span { min, max: None }
}

const fn span(min: usize, max: usize) -> Span {
    Span {
        min,
        max: Some(max),
    }
}

const NORMS: &[Operator] = &[
    Operator::Rmsnorm,
    Operator::Layernorm,
    Operator::ResidualLayernorm,
];

/// The operators taking aligned packs on misaligned rows by default, but
/// for cross_entropy's forward (its own rungs).
const ALIGNED_PACK_OPS: &[Operator] = &[
    Operator::Sum,
    Operator::Softmax,
    Operator::SoftmaxBackward,
    Operator::CrossEntropyWithGrad,
    Operator::CrossEntropyBackward,
    Operator::CrossEntropyBackwardRecompute,
];

/// Problems at least this large (the H200's L2 is 50 MB) are where the
/// streamed plans of [`whole_row_stream_instead`] and
/// [`hinted_stream_instead`] were measured.
const PAST_L2_BYTES: u64 = 64 << 20;

/// The shortest misaligned norm decode row that reads aligned packs.
const MISALIGNED_DECODE_MIN_N: usize = 9999;

/// The longest misaligned norm row that keeps its plain packs on at least
/// as many rows as multiprocessors (the aligned-packs rung starts past it).
const TINY_NORM_PLAIN_MAX_N: usize = 255;

/// Misaligned 16-bit norm decode rows of this length read aligned packs of
/// at most 8 bytes ([`scalar_pack_too_wide`]).
const MISALIGNED_DECODE_8_BYTE_N: Span = span(MISALIGNED_DECODE_MIN_N, 65535);

/// Rows this long (and no longer) stream whole on the H200 when the
/// problem is larger than the L2 ([`whole_row_stream_instead`]).
const WHOLE_ROW_STREAM_N: Span = span(4096, 8192);

/// The variants an automatic request takes on the H200, one ladder per
/// variant, thresholds rising with the row length. The measurements are
/// paired benches whose directories are in git history at 2d680226
/// unless named.
#[rustfmt::skip]
pub(super) const VARIANT_LADDERS: &[Rung] = &[
    // Misaligned rows read in aligned packs: every pack but each row's
    // first and last one vector access, where scalar accesses read them
    // before. Old default against new, A B B A, L2 cold
    // (2026-12-03-aligned-packs-h200): cross_entropy_backward bf16
    // 8192x50257 1005 -> 569 µs, f32 4096x50257 873 -> 456; with_grad bf16
    // 4096x50257 579 -> 362; softmax bf16 24576x577 32.5 -> 18.8, 2048x50257
    // 307 -> 177, f32 4096x10001 200 -> 166; softmax_backward bf16
    // 24576x577 24.8 -> 24.4; decode softmax bf16 32x50257 (L2 warm) 8.9
    // -> 7.9. Frozen replay, 4 rounds: cross_entropy bf16 7168x51866 210.6
    // -> 188.5 µs, 4096x50257 117.8 -> 108.7
    // (2026-12-03-ce-bf16-aligned-packs-replay-h200). Rows under 1024 only
    // in their hundreds (at least one per SM, as measured): a few short
    // rows were not measured, and there the guarded packs are most of a
    // row.
    Rung(ALIGNED_PACK_OPS, Dtypes::Any, from(SCALAR_SHORT_N), Rows::Shifted, "aligned-packs"),
    Rung(ALIGNED_PACK_OPS, Dtypes::Any,
         span(1, SCALAR_SHORT_N - 1), Rows::ShiftedAtLeastSms, "aligned-packs"),
    // The norms, whose columns cannot follow a row's shift and are read
    // element by element, where N is no multiple of 4: their plain plans
    // read scalars there. Default against aligned packs, A B B A, L2 cold
    // (2026-12-04-norms-aligned-packs-h200): rmsnorm f32 4096x30522 576
    // -> 304 µs, bf16 2048x5001 28.2 -> 19.5; layernorm bf16 4096x1602
    // 20.0 -> 16.0, f32 16384x2050 110 -> 87; residual_layernorm bf16
    // 8192x3003 122 -> 78, f32 4096x4097 125 -> 74. Where N is a multiple
    // of 4 the plain 16-bit plans read 8-byte vectors and won (rmsnorm
    // bf16 4096x4100 21.2 against 26.3 µs, 3000x2500 11.8 against 15.0,
    // layernorm bf16 64x4100 2.9 against 4.2): the weight's eight scalar
    // loads a pack cost more than the wider pack saves. Old choice against
    // new on rows not used to set this (2026-12-04-norms-aligned-packs-
    // rule-h200): 1.07-1.75x on 1024-24576 rows (rmsnorm bf16 1024x12289
    // 34.6 -> 19.8 µs, 4096x4097 39.4 -> 26.6; layernorm bf16 24576x803
    // 32.7 -> 30.6), while decode rows (1-64, L2 warm) lost 0.74-0.90x
    // (residual_layernorm bf16 64x2050 2.26 -> 3.05): fewer rows than SMs
    // keep their plain plans. Rows under 256 at one to two rows an SM ran
    // 1.23-1.32x faster without them on seven of seven (H100, A B B A, L2
    // cold-inputs, rows of no list but the drawn residual_layernorm f32
    // 152x105: 2.28 -> 1.79 µs; 2026-12-07-tiny-misaligned-norm-rows-plain-
    // packs-h100): on a row of a few hundred bytes the shifted head and
    // tail cost more than the vectors save.
    Rung(NORMS, Dtypes::Any, from(TINY_NORM_PLAIN_MAX_N + 1),
         Rows::ShiftedOffFourAtLeastSms, "aligned-packs"),
    // ... and on fewer rows than SMs, rows of 65536 and more, which span a
    // cluster: rmsnorm and 16-bit residual_layernorm. Default against
    // aligned packs, A B B A, L2 cold-inputs, rows of no list: rmsnorm
    // 1.18-1.59x on six of six (f32 16x100003 16.8 -> 10.9 µs, bf16
    // 8x200001 11.4 -> 7.2; 2026-12-07-rmsnorm-decode-cluster-aligned-packs-
    // h100; on the H200 f32 24x120001 1.55x, bf16 50x90001 1.74x:
    // 2026-12-06-norm-decode-cluster-aligned-packs-h200); residual_layernorm
    // bf16 1.14-1.87x on five of five (30x200003 55.0 -> 29.4; 2026-12-07-
    // residual-layernorm-bf16-decode-cluster-aligned-packs-h100; H200
    // 40x150001 1.47x). Streamed clusters of 8 groups of 256 came within
    // 0.96-1.12x of these (2026-12-07-residual-layernorm-bf16-decode-stream-
    // cluster-h100). layernorm bf16 16x200003 (0.95x, another cluster) and
    // residual_layernorm f32 30x65537 (1.00x) keep their plans. Down to
    // rows of 9999 in one group or a cluster (the shortest measured; rows
    // of about 2050 lost, 0.74-0.90x): 1.05-2.11x on nine of nine,
    // rmsnorm f32 24x21035 13.0 -> 6.2 µs, bf16 60x9999 4.81 -> 4.38,
    // layernorm bf16 24x21035 1.44x, residual_layernorm bf16 32x20001
    // 1.77x (H100, A B B A, L2 cold-inputs, rows of no list but a drawn
    // one: 2026-12-07-norm-decode-misaligned-rows-under-65536-h100). Its
    // 16-bit rows keep the 8-byte packs they were measured in
    // ([`scalar_pack_too_wide`]): 16-byte ones ran 0.80-0.96x on five of
    // six (2026-12-07-misaligned-decode-16-byte-packs-h100).
    Rung(&[Operator::Rmsnorm], Dtypes::Any,
         from(MISALIGNED_DECODE_MIN_N), Rows::ShiftedFewerThanSms, "aligned-packs"),
    Rung(&[Operator::ResidualLayernorm], Dtypes::Bits16,
         from(MISALIGNED_DECODE_MIN_N), Rows::ShiftedFewerThanSms, "aligned-packs"),
    Rung(&[Operator::Layernorm], Dtypes::Bits16,
         span(MISALIGNED_DECODE_MIN_N, 65535), Rows::ShiftedFewerThanSms, "aligned-packs"),
    // ... cross_entropy's forward in 16-bit rows only (f32 4096x50257 ran
    // at par, 192.9 against 193.2 µs), on at least as many rows as SMs or
    // rows over 65536: its decode rows of 8-128 x 32001-51866 ran 3.5-6%
    // slower in aligned packs (bf16 64x50257 5.27 -> 5.57 µs, L2 warm),
    // 16x128257 6% faster (8.93 -> 8.46).
    Rung(&[Operator::CrossEntropy, Operator::CrossEntropyWithLse], Dtypes::Bits16,
         from(1), Rows::ShiftedAtLeastSms, "aligned-packs"),
    Rung(&[Operator::CrossEntropy, Operator::CrossEntropyWithLse], Dtypes::Bits16,
         from(65537), Rows::Shifted, "aligned-packs"),
    // cross_entropy_backward 16-bit on shifted rows of more than 49152
    // (six chunks of W=1024 V=8): no row guard on the stores
    // (`unguarded-stores`), so a worker keeps two 16-byte loads in flight
    // instead of issuing each chunk's load after the last store. There the
    // aligned-packs kernel takes 56-64 registers with the guard or
    // without, and keeps its groups: `lanefold compile-check --ops
    // cross_entropy_backward --dtypes bf16 --draw 200 --max-rows 16384
    // --n-range 2000-262144 --toggle unguarded-stores` (NVRTC 13.0) keeps
    // them on all 48 such plans with aligned packs; from 32769 to 49152 the
    // kernel sits at 32 registers and spills 16 bytes more without the
    // guard, and shorter rows lose a group on 20 of 67 (4096x32001: 32
    // -> 50 registers, two groups to one), as do aligned rows (32 -> 50)
    // and f32 (3 -> 2). A B B A on an H100, L2 cold (printed means,
    // bench/selftest-logs/2026-12-06-token-campaigns-h100): bf16
    // 7168x51866 580 -> 541 µs, while aligned 6000x50000 went 414 -> 436.
    // The rung against the former plan on five shapes of no list, the same
    // way (bench/results/2026-12-06-default-rungs-h100): 1.021-1.078x
    // (bf16 2048x50796 166 -> 154 µs).
    Rung(&[Operator::CrossEntropyBackward], Dtypes::Bits16,
         from(49153), Rows::Shifted, "unguarded-stores"),
    // layernorm register plans of rows longer than 10240 recompute the
    // centred row x - mean in the output phase (`recompute-derived`)
    // instead of keeping it as a second tile beside the row. `lanefold
    // compile-check --ops layernorm --dtypes f32,bf16 --draw 300 --n-range
    // 512-40000 --toggle recompute-derived` (NVRTC 13.0): above 10240 it
    // raises groups a multiprocessor on 7 of 78 plans (f32 2048x22408: 177
    // -> 128 registers, one group of 256 to two) and keeps them on 71; at
    // or below it raises them on 29 of 209 and lowers them on 3 (bf16
    // 4204x5056, 64 -> 79 registers, 4 -> 3 groups). A B B A against the
    // former plans on shapes of no list, an H100, L2 cold
    // (bench/results/2026-12-06-default-rungs-h100): bf16 16384x18816
    // 1.338x, 32768x21320 1.244x, f32 512x21828 1.089x, 4096x19840 and
    // 16384x20335 1.01x; rows of 9984 and shorter at 0.994-1.006x but f32
    // 1024x3898 0.950x, where a group gained (4 -> 5) fills no more waves
    // and the recomputation costs. residual_layernorm is left out: two of
    // four ran slower where its count rises (f32 2048x11008 0.982x at 2 ->
    // 3 groups, 65536x9216 0.992x at 3 -> 4).
    Rung(&[Operator::Layernorm], Dtypes::Any, from(10241), Rows::Any, "recompute-derived"),
    // Resident 16-bit tiles packed two values per register. Rows of 131072
    // and more, every operator holding a tile, both long shapes:
    // 1.01-1.25x (softmax 4096x131072 691 -> 645 µs). Softmax from 32768:
    // its one-group register plan on 4096x32768 drops from 124 to 64
    // registers and beats the streamed plan that replaced it (150.4 ->
    // 131.7 µs, 4.08 TB/s). Not on shorter rows, where it was not measured
    // wide enough and raised residual_layernorm 32768x4096 from 66 to 79
    // registers; not for rmsnorm and layernorm on 4096x32768, where the
    // one-group plan keeps 110-123 registers (136.4 and 149.1 µs against
    // 128.5 streamed and 149.6).
    Rung(&[Operator::Softmax], Dtypes::Bits16, from(32768), Rows::Any, "packed-resident"),
    Rung(NORMS, Dtypes::Bits16, from(131072), Rows::Any, "packed-resident"),
    // 16-bit layernorm rows that one group holds: packed and the columns
    // loaded in order, so the W=512 register plan takes 62 registers
    // instead of 128, two groups per SM (4096x32768: 134.0 µs against
    // 141.7, paired). Longer rows span clusters, where ordered columns are
    // unmeasured.
    Rung(&[Operator::Layernorm], Dtypes::Bits16,
         span(32768, 65535), Rows::Any, "ordered-columns packed-resident"),
    // cross_entropy on rows over 32768: the online normalizer. The row is
    // then read once with nothing held resident, so one streaming group
    // replaces a cluster of register groups: 4096x131072 f32 556 -> 473
    // µs, bf16 357 -> 244; 1024x262144 f32 366 -> 248, bf16 257 -> 133. On
    // rows of 32768 and less the register plan already reads once and
    // bf16 became 10-13% slower (the extra exp work). The lse-saving
    // forward is that kernel plus a per-row store (not measured apart).
    Rung(&[Operator::CrossEntropy, Operator::CrossEntropyWithLse], Dtypes::Any,
         from(32769), Rows::Any, "online-normalizer"),
    // ... and on misaligned rows over 24576, where the register plans read
    // scalars and their tiles leave one group per SM (NVRTC: the W=512
    // tile takes 73-77 registers from 28002, the W=256 one 137 at 30522).
    // Such one-group plans of 27001-28002 ran 136-142 µs (f32) and 115-120
    // (bf16) against 105-109 and 65-67 online; the best register plans,
    // two groups per SM, 101-105 and 60-71
    // (2026-12-03-search-ce-misaligned-*-h200, rows of no list; at 24002
    // the register plans still won: 2026-12-03-search-ce-unaligned-f32).
    Rung(&[Operator::CrossEntropy, Operator::CrossEntropyWithLse], Dtypes::Any,
         from(24577), Rows::Misaligned, "online-normalizer"),
    // 16-bit softmax on rows of 18432-32767 larger than the L2: the online
    // normalizer, in the register layout of [`online_register_instead`].
    // Rows shifted into aligned packs over 26000 keep the streamed plan:
    // their tile takes 76 registers, one group per SM (8192x30522 315.8 ->
    // 408.4 µs).
    Rung(&[Operator::Softmax], Dtypes::Bits16,
         span(18432, 26000), Rows::PastL2, "online-normalizer"),
    Rung(&[Operator::Softmax], Dtypes::Bits16,
         span(26001, 32767), Rows::AlignedPastL2, "online-normalizer"),
    // layernorm from 32768: one-pass moments (bf16 4096x131072 882 -> 703
    // µs; f32 and the shorter rows within 4% either way then,
    // residual_layernorm included). f32 on the pushed cluster: 4096x131072
    // 1149 -> 1132 µs, 1024x262144 635 -> 633 (A/A 1128 and 629). Rows of
    // 32768 (paired with all three peers, 2 rounds): f32 283.7 -> 278.0
    // µs, bf16 149.9 -> 143.5.
    Rung(&[Operator::Layernorm], Dtypes::Any, from(32768), Rows::Any, "one-pass-moments"),
    // layernorm on rows of 4096-8192 larger than the L2: one-pass moments,
    // for the two-pass streamed plan of [`whole_row_stream_instead`], as
    // Inductor's Welford loop. One-pass moments changes the bits, so a
    // batch-invariant request skips it (regression test
    // `regression_batch_invariant_norms_take_one_arithmetic_at_every_row_count`).
    Rung(&[Operator::Layernorm], Dtypes::F32OrBf16,
         WHOLE_ROW_STREAM_N, Rows::PastL2, "one-pass-moments"),
    // Fewer rows than multiprocessors: one reduction phase instead of two
    // on a latency-bound row (1.02-1.13x on all 24 cases of 1x127, 17x257
    // and 1-64 x 4096 in both dtypes, paired in 3 rounds).
    Rung(&[Operator::Layernorm, Operator::ResidualLayernorm], Dtypes::Any,
         from(0), Rows::FewerThanSms, "one-pass-moments"),
    // Fewer rows than multiprocessors: every chunk's columns (at most 8)
    // loaded early, so their round trip overlaps the row's loads and
    // exchange instead of following them on a latency-bound row. Paired
    // in 4 rounds with an A/A control, 16-128 rows of 1536-5120
    // (2026-12-02-early-columns-short-h200): f32 rows up to 4096 1.02-1.19x
    // (9 of 9 cases; 5120, three chunks of W=512: 0.88-0.99x, so not
    // there); rmsnorm and layernorm 16-bit 1.01-1.61x (8 of 8; measured to
    // 5120, taken to 8192, the same two chunks of W=512 V=8);
    // residual_layernorm 16-bit 0.97-0.98x on three of four there. On its
    // aligned rows up to 512, one chunk a worker, 1.06-1.07x on all seven
    // (H100, A B B A, rows of no list:
    // 2026-12-07-residual-layernorm-decode-early-columns-h100, L2 warm;
    // -residual-layernorm-bf16-decode-early-columns-h100, cold inputs); in
    // more chunks 0.89-0.96x on three (3x300, 1x640, 9x1000), 1.10x on
    // 60x800.
    Rung(NORMS, Dtypes::F32, span(0, 4096), Rows::FewerThanSms, "early-columns=8"),
    Rung(&[Operator::Rmsnorm, Operator::Layernorm], Dtypes::Bits16,
         span(0, 8192), Rows::FewerThanSms, "early-columns=8"),
    Rung(&[Operator::ResidualLayernorm], Dtypes::Bits16,
         span(0, 512), Rows::AlignedFewerThanSms, "early-columns=8"),
    // layernorm f32 from 131072: the first chunk's weight and bias loaded
    // before the cluster's exchange (paired in 3 rounds: 4096x131072
    // 1.009-1.016x, 1024x262144 1.019-1.021x; measured on these two
    // lengths only; not bf16, where the second group on each SM already
    // covers the wait, nor rmsnorm f32, whose registers went 80 -> 106).
    // Only where part of the row sits in shared memory
    // ([`early_columns_only_with_shared_chunks`]).
    Rung(&[Operator::Layernorm], Dtypes::F32,
         from(EARLY_COLUMNS_LONG_N), Rows::Any, "early-columns=1"),
    // rmsnorm 16-bit from 262144: the weight staged in shared memory by
    // `cp.async` (1024x262144 370 -> 349; 4096x131072 588 -> 828, so not
    // there). f32 pushes unstaged (below).
    Rung(&[Operator::Rmsnorm], Dtypes::Bits16, from(262144), Rows::Any, "staged-columns"),
    // Rows that span a cluster push their partials with `st.async`:
    // residual_layernorm from 32768, where its f32 default on 4096x32768 is
    // already a cluster of eight groups (651 -> 522 µs; the long rows
    // 1.22-1.37x).
    Rung(&[Operator::ResidualLayernorm], Dtypes::Any, from(32768), Rows::Any, "push-reduce"),
    // The others from 131072 (softmax and the bf16 norms 1.10-1.34x
    // against the fenced exit; softmax f32 4096x131072 1134 -> 1034 µs,
    // bf16 1024x262144 347 -> 260). Layernorm f32 pushes without a promise
    // of three groups (104 registers, no spill; with it, 104 bytes
    // spilled): 4096x131072 1223 -> 1152 µs, 1024x262144 681 -> 633.
    // rmsnorm f32 pushes without the staged weight: 1024x262144 576 ->
    // 561, 4096x131072 1094 -> 1050. cross_entropy 1024x262144 1.02-1.04x
    // (on 4096x131072 it runs in one group, no cluster).
    Rung(&[Operator::Softmax, Operator::CrossEntropy, Operator::CrossEntropyWithLse,
           Operator::Layernorm, Operator::Rmsnorm],
         Dtypes::Any, from(PUSH_RUNG_MIN_N), Rows::Any, "push-reduce"),
];

/// Where the push-reduce rung starts for softmax, cross-entropy and the
/// norms; shorter softmax rows get the push after the model's pick
/// ([`cluster_pushed_instead`]).
const PUSH_RUNG_MIN_N: usize = 131072;

/// Each rung's tokens, parsed once (a test holds them to parsing).
fn rung_variants() -> &'static [LayoutRequest] {
    static PARSED: OnceLock<Vec<LayoutRequest>> = OnceLock::new();
    PARSED.get_or_init(|| {
        VARIANT_LADDERS
            .iter()
            .map(|rung| {
                (rung.4)
                    .parse()
                    .unwrap_or_else(|e| panic!("variant ladder {rung:?}: {e}"))
            })
            .collect()
    })
}

impl Rung {
    fn covers(&self, problem: &Problem, target: &Target, batch_invariant: bool) -> bool {
        let (shifted, count) = (!sixteen_byte_rows(problem), problem.shape.rows);
        let sms = target.multiprocessors as usize;
        let Rung(ops, dtypes, n, rows, _) = self;
        let rows = match rows {
            Rows::Any => true,
            Rows::Misaligned => shifted,
            _ if batch_invariant => false,
            Rows::Shifted => shifted,
            Rows::ShiftedAtLeastSms => shifted && count >= sms,
            Rows::ShiftedOffFourAtLeastSms => !problem.shape.n.is_multiple_of(4) && count >= sms,
            Rows::FewerThanSms => count < sms,
            Rows::ShiftedFewerThanSms => shifted && count < sms,
            Rows::AlignedFewerThanSms => !shifted && count < sms,
            Rows::PastL2 => past_l2(problem),
            Rows::AlignedPastL2 => !shifted && past_l2(problem),
        };
        problem.operator_kind().is_some_and(|op| ops.contains(&op))
            && dtypes.contain(problem.dtype)
            && n.contains(problem.shape.n)
            && rows
    }
}

/// The variants of every rung covering `problem` (on the H200).
pub(super) fn variant_rungs<'a>(
    problem: &'a Problem,
    target: &'a Target,
    batch_invariant: bool,
) -> impl Iterator<Item = &'static LayoutRequest> + 'a {
    VARIANT_LADDERS
        .iter()
        .zip(rung_variants())
        .filter(move |(rung, _)| rung.covers(problem, target, batch_invariant))
        .map(|(_, variants)| variants)
}

/// Register plans keeping this many private slots per thread compile to
/// 108-128 registers on sm_90 (the estimate says 100), one or two groups
/// per multiprocessor (`lanefold compile-check`).
const WIDE_SLOT_PLAN: usize = 64;

/// Packs too wide for rows that cannot be read as vectors (rows whose
/// length in bytes is not a multiple of the access: every access a scalar
/// one), left out of the model's choice on the H200, which prices a pack
/// as one vector access. A sum, with nothing but its loads to schedule,
/// ran V=8 at par and keeps every pack.
/// - Any such row: at most four elements. V=8 ran 1.10-1.19x slower than
///   V=4 on bf16 1x127 and 17x257 for every operator with a column or a
///   second reduction (a 2026-11-30 search, in git history at 2d680226).
/// - Short rows (below [`SCALAR_SHORT_N`]) in their thousands (at least
///   [`SCALAR_MANY_ROWS_PER_SM`] per multiprocessor): at most 4 bytes, so
///   that a warp's scalar loads are consecutive words. Wider packs stride
///   them: softmax f32 16384x75 ran 8.5 µs at V=4 against 2.9 at V=1, bf16
///   75648x197 66.0 at V=4 against 28.7 at V=2 with the model's W
///   (2026-12-02-search-short-unaligned-*-h200, L2 warm). In aligned
///   packs too: bf16 24576x577 ran 18.8 µs at V=2 against 27.7-35.9 at
///   V=8, f32 16384x577 20.8 at V=1 against 22.4-33.9 at V=2 and V=4
///   (2026-12-03-search-aligned-packs-h200).
///
/// Aligned packs ([`LayoutRequest::aligned_packs`]) read vectors, so the
/// first cap leaves them on rows of [`SCALAR_SHORT_N`] and more:
/// cross_entropy bf16 4096x50257 ran 108.7 µs at W=512 V=8 against 113.3
/// at V=4, 7168x51866 186.7 against 189.2. Shorter rows, where the
/// guarded first and last packs are most of a row, were not measured
/// wider and keep it.
/// - 16-bit norm decode rows (fewer than multiprocessors) of
///   [`MISALIGNED_DECODE_8_BYTE_N`] in aligned packs: at most 8 bytes. V=8
///   ran 0.80-0.96x of V=4 on five of six rows of no list (H100, A B B A,
///   L2 cold-inputs: layernorm bf16 24x21035 6.01 against 7.48 µs, rmsnorm
///   24x21035 5.06 against 5.69; 16x30001 1.25x the other way;
///   `2026-12-07-misaligned-decode-16-byte-packs-h100`).
pub(crate) fn scalar_pack_too_wide(
    problem: &Problem,
    target: &Target,
    pack: u32,
    aligned_packs: bool,
) -> bool {
    if target.name != "h200"
        || problem.operator_kind() == Some(Operator::Sum)
        || vector_access(problem.dtype, pack as usize, problem.shape.n).is_some()
    {
        return false;
    }
    let Shape { rows, n } = problem.shape;
    let sms = target.multiprocessors as usize;
    let many_short = n < SCALAR_SHORT_N && rows >= SCALAR_MANY_ROWS_PER_SM * sms;
    let norm_decode = problem.dtype.size_bytes() == 2
        && problem
            .operator_kind()
            .is_some_and(|op| NORMS.contains(&op))
        && rows < sms
        && MISALIGNED_DECODE_8_BYTE_N.contains(n);
    if aligned_packs && norm_decode {
        pack > 4
    } else if many_short {
        pack > 4 / problem.dtype.size_bytes() as u32
    } else {
        pack > 4 && !(aligned_packs && n >= SCALAR_SHORT_N)
    }
}

/// Cross-entropy widths left out of the model's choice on the H200 for
/// rows from [`CE_LONG_N`] in their hundreds (at least one per SM), one
/// group a row. In the searches of 12 such problems (12002-40002 wide,
/// f32 and bf16, aligned or not; 2026-12-03-search-ce-*-h200):
/// - a group of 1024 threads, one per SM, never won: 1.02-1.98x slower
///   than the best (28002 f32 142.5 µs against 105.0);
/// - with the online normalizer (32 registers, nothing resident), W=256
///   won 10 of 11 by up to 12% over W=512 (bf16 32064 129.0 against
///   144.8 µs; lost 1% at bf16 40002), so up to [`CE_ONLINE_W256_MAX_N`]
///   it is the only width.
pub(crate) fn cross_entropy_width_left_out(
    problem: &Problem,
    target: &Target,
    plan: &Plan,
) -> bool {
    let ce = matches!(
        problem.operator_kind(),
        Some(Operator::CrossEntropy | Operator::CrossEntropyWithLse)
    );
    if target.name != "h200"
        || !ce
        || plan.groups_per_row != 1
        || problem.shape.n < CE_LONG_N
        || problem.shape.rows < target.multiprocessors as usize
    {
        return false;
    }
    if plan.online_normalizer() && problem.shape.n <= CE_ONLINE_W256_MAX_N {
        return plan.layout.workers != 256;
    }
    plan.threads_per_group >= 1024
}

/// A forward cross-entropy candidate spanning a cluster in aligned packs,
/// replaced by the same schedule without them: its packs then read as
/// before aligned packs reached a cluster's groups. The one measurement
/// (H100 A B B A, L2 cold-inputs,
/// `2026-12-06-misaligned-cluster-aligned-packs-h100`): bf16 96x200003
/// ran 0.89x in aligned packs (W=4096 V=8 U=4 against V=4 U=8 read
/// element by element), f32 48x180001 1.007x, where softmax and the norms
/// ran 1.2-2.0x. The aligned-packs rungs of cross-entropy were measured
/// on rows in one group, which keep them.
pub(super) fn cross_entropy_cluster_unshifted(problem: &Problem, candidate: Legal) -> Legal {
    let forward_ce = matches!(
        problem.operator_kind(),
        Some(Operator::CrossEntropy | Operator::CrossEntropyWithLse)
    );
    if !forward_ce || !candidate.plan.aligned_packs || candidate.plan.groups_per_row == 1 {
        return candidate;
    }
    let request = LayoutRequest {
        aligned_packs: false,
        ..candidate.request
    };
    replanned(problem, candidate, request)
}

/// `candidate` with `request` in place of its own, where that is legal.
fn replanned(problem: &Problem, candidate: Legal, request: LayoutRequest) -> Legal {
    match plan_rows(problem, &candidate.target, &request) {
        Ok(plan) => Legal {
            request,
            plan,
            ..candidate
        },
        Err(_) => candidate,
    }
}

/// Where the layernorm f32 rung of early columns starts.
const EARLY_COLUMNS_LONG_N: usize = 131072;

/// A layernorm f32 candidate of rows from [`EARLY_COLUMNS_LONG_N`] that
/// holds its whole row in registers, replaced by the same schedule without
/// early columns. The rung was measured on plans keeping part of the row
/// in shared memory (1.009-1.021x). On register tiles the early columns
/// take 104 to 130 registers (NVRTC 13.0, `compile-check`), one group a
/// multiprocessor where the estimate counts two, and dropping them ran
/// 1.08-1.23x (H100 A B B A, L2 cold-inputs,
/// `2026-12-06-layernorm-f32-long-early-columns-h100`: 800x150000 419 ->
/// 340 µs, 1200x140000 580 -> 538).
pub(super) fn early_columns_only_with_shared_chunks(problem: &Problem, candidate: Legal) -> Legal {
    let long_f32_layernorm = problem.operator_kind() == Some(Operator::Layernorm)
        && problem.dtype == DType::F32
        && problem.shape.n >= EARLY_COLUMNS_LONG_N;
    if !long_f32_layernorm
        || candidate.plan.early_columns == 0
        || candidate.plan.shared_chunks.is_some()
    {
        return candidate;
    }
    let request = LayoutRequest {
        early_columns: 0,
        ..candidate.request
    };
    replanned(problem, candidate, request)
}

/// Cross-entropy rows at least this long for [`cross_entropy_width_left_out`].
pub(crate) const CE_LONG_N: usize = 12000;

/// The longest online-normalizer rows measured at W=256 against W=512.
pub(crate) const CE_ONLINE_W256_MAX_N: usize = 40960;

/// Rows shorter than this count as short for [`scalar_pack_too_wide`]
/// (measured at 75 and 197).
pub(crate) const SCALAR_SHORT_N: usize = 1024;

/// Rows per multiprocessor from which [`scalar_pack_too_wide`] keeps a
/// warp's scalar loads consecutive (measured from 124 per SM up).
pub(crate) const SCALAR_MANY_ROWS_PER_SM: usize = 8;

/// f32 rows shorter than this take one warp a row from one row a
/// multiprocessor ([`short_f32_one_warp_instead`]).
const ONE_WARP_F32_N: usize = 64;

/// Misaligned f32 rmsnorm, layernorm and softmax rows under
/// [`ONE_WARP_F32_N`], from one row a multiprocessor up to
/// [`SCALAR_MANY_ROWS_PER_SM`] (where [`scalar_pack_too_wide`] leaves the
/// model this layout itself): one warp a row of scalars, eight rows a
/// group, in place of the aligned packs of four at W=8-16 the model
/// picks. A B B A, L2 cold-inputs, 300-1000 rows of 21-61: 1.25-1.48x on
/// six of six (rmsnorm 300x61 1.95 -> 1.32 µs; H100,
/// `2026-12-07-short-misaligned-f32-rows-one-warp-h100`); on the H200
/// rmsnorm 900x29 ran 1.90 µs so, 1200-2000 rows of 45-61 1.36-1.49 one
/// warp a row (`2026-12-06-norm-short-rows-groups-h200`).
pub(super) fn short_f32_one_warp_instead(
    problem: &Problem,
    target: &Target,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let (rows, n, sms) = (
        problem.shape.rows,
        problem.shape.n,
        target.multiprocessors as usize,
    );
    let op = problem.operator_kind();
    (matches!(
        op,
        Some(Operator::Rmsnorm | Operator::Layernorm | Operator::Softmax)
    ) && problem.dtype == DType::F32
        && n < ONE_WARP_F32_N
        && !sixteen_byte_rows(problem)
        && (sms..SCALAR_MANY_ROWS_PER_SM * sms).contains(&rows))
    .then_some(LayoutRequest {
        workers: 32,
        pack: 1,
        unroll: 1,
        rows_per_group: 8,
        ..*pick
    })
}

/// At most this many workers per row when there are fewer rows than
/// multiprocessors (see [`few_rows_narrower_instead`]).
pub(crate) fn few_rows_max_workers(op: Operator) -> u32 {
    match op {
        // Two reductions (softmax) or a gather besides one (cross_entropy):
        // W=256 was best on every such f32 problem of the decode search.
        Operator::Softmax | Operator::CrossEntropy | Operator::CrossEntropyWithLse => 256,
        _ => 512,
    }
}

/// With fewer rows than multiprocessors each row is alone on its SM, and a
/// row's time is its latency: one block reduction across W/32 warps. The
/// model prices that level flat, so it spreads a 4096-wide f32 row over
/// 1024 workers; 512 (256 for softmax and cross_entropy) with every pack
/// loaded at once ran 1.05-1.22x faster on every operator at 1, 8, 32 and
/// 64 rows (2026-11-30 searches, in git history at 2d680226). One-group register plans only,
/// with at most eight packs per worker; measured on the H200 only.
pub(super) fn few_rows_narrower_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let workers = few_rows_max_workers(problem.operator_kind()?);
    let pack = picked.layout.pack;
    let chunks = problem.shape.n.div_ceil((workers * pack) as usize) as u32;
    if problem.shape.rows >= target.multiprocessors as usize
        || picked.layout.workers <= workers
        || picked.groups_per_row != 1
        || picked.rereads_tiles()
        || chunks > 8
    {
        return None;
    }
    // A resident tile loads every pack at once whatever U says (U=1, 2
    // and 4 measured alike); a sum holds nothing, so U=chunks puts every
    // load in flight (U=1 ran 1.12-1.16x slower on sum f32 at W=512).
    let unroll = if picked.resident_slots > 0 { 1 } else { chunks };
    let narrower = LayoutRequest {
        workers,
        pack,
        unroll,
        rows_per_group: 0,
        ..*pick
    };
    let plan = plan_rows(problem, target, &narrower).ok()?;
    (plan.groups_per_row == 1 && !plan.rereads_tiles()).then_some(narrower)
}

/// An H200 pick of one group a row on f32 or bf16 rows of `ops`, at most
/// half as many as multiprocessors: where the decode rules that spread a
/// row over several groups were measured.
fn one_group_decode_pick(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    ops: &[Operator],
) -> bool {
    problem.operator_kind().is_some_and(|op| ops.contains(&op))
        && matches!(problem.dtype, DType::F32 | DType::Bf16)
        && 2 * problem.shape.rows <= target.multiprocessors as usize
        && picked.groups_per_row == 1
}

/// Norm row bytes [`decode_norm_spread_instead`] takes: the class of the
/// drawn misses (f32 rows of 7000-28000), measured at 28-96 KB.
const DECODE_NORM_SPREAD_BYTES: Span = span(28_000, 112_000);

/// Norm decode rows of [`DECODE_NORM_SPREAD_BYTES`] on at most half the
/// multiprocessors, 16-byte aligned, f32 or bf16, where the model's pick
/// holds a row in one group: the row spread over as many groups of 512 as
/// keep every row within one wave, at most the power of two over the row's
/// 16-byte packs, partials pushed; where that is two groups, one group of
/// 1024. One group of 512 a row (the narrower rule) reads each row from
/// one SM while most idle: rmsnorm f32 16x14272 ran 4.77 µs against
/// Liger's 3.56 (a drawn problem of no list, H100). The pick against
/// this, A B B A on nine rows of no list (H100, L2 warm,
/// `2026-12-06-norm-decode-wide-h100`): in clusters of 4-8 1.10-1.48x
/// (rmsnorm f32 8x12000 3.10 -> 2.09 µs, bf16 12x18000 2.95 -> 2.18,
/// layernorm f32 20x11000 3.43 -> 2.56, residual_layernorm f32 12x7000
/// 2.90 -> 2.63), in one group of 1024 1.01-1.39x (48-64 rows of
/// 9000-24000; layernorm bf16 40x24000 5.07 -> 3.65).
pub(super) fn decode_norm_spread_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let Shape { rows, n } = problem.shape;
    let sms = target.multiprocessors as usize;
    let norms = [
        Operator::Rmsnorm,
        Operator::Layernorm,
        Operator::ResidualLayernorm,
    ];
    if !one_group_decode_pick(problem, target, picked, &norms)
        || !sixteen_byte_rows(problem)
        || !DECODE_NORM_SPREAD_BYTES.contains(n * problem.dtype.size_bytes())
    {
        return None;
    }
    const THREADS: u32 = 512;
    let pack = sixteen_byte_pack(problem.dtype);
    let fit = (sms / rows.max(1)).min(target.max_cluster_groups as usize);
    let groups = (1u32 << fit.ilog2())
        .min((n.div_ceil(pack as usize).next_power_of_two() as u32 / THREADS).max(1));
    let cluster = groups > 2;
    let spread = LayoutRequest {
        workers: if cluster { groups * THREADS } else { 1024 },
        pack,
        unroll: 1,
        rows_per_group: 0,
        push_cluster_reduce: cluster,
        cluster_group_threads: if cluster { THREADS } else { 0 },
        ..*pick
    };
    let target = with_cluster_group_threads(target, spread.cluster_group_threads).ok()?;
    let plan = plan_rows(problem, &target, &spread).ok()?;
    let groups_per_row = if cluster { groups } else { 1 };
    (plan.groups_per_row == groups_per_row && !plan.rereads_tiles()).then_some(spread)
}

/// The shortest bf16 layernorm rows [`few_rows_one_chunk_instead`] takes:
/// the shortest measured (640-1664). On 17x257 W=32 ran 1.13x faster
/// than one chunk (`2026-12-01-t4-grid-1x127-17x257-s20-h200`).
const FEW_ROWS_ONE_CHUNK_LAYERNORM_MIN_N: usize = 640;

/// The bf16 residual_layernorm rows [`few_rows_one_chunk_instead`] takes:
/// 16-byte rows of 257-512, two chunks of one warp or one of two. A B B A
/// against the one-warp pick (H200, L2 warm,
/// `2026-12-06-rln-tiny-one-chunk-h200`): 30x416 2.04 -> 1.76 µs, 8x320
/// 2.00 -> 1.69, 50x480 2.05 -> 1.76; f32 40x448 ran 1.045x, under the
/// campaign's bar of 1.05x, so f32 keeps the model's pick.
const FEW_ROWS_ONE_CHUNK_RESIDUAL_N: Span = span(257, 512);

/// A norm's register pick on fewer rows than multiprocessors that leaves
/// a worker more than one chunk, where one chunk a worker fits within
/// [`few_rows_max_workers`]: W the next power of two over the row's packs,
/// the pick's V, one chunk. A row alone on its SM is latency: the narrow
/// pick walks its chunks in turn. The model picks one warp a row on
/// bf16 rows up to 1792 and f32 up to 896. In H200 searches of rows of no
/// list, against the best:
/// - rmsnorm bf16 32x896: one chunk (W=128) first, W=32 1.31x;
/// - rmsnorm bf16 32x1792: one chunk (W=256) first, the pick (W=32) 1.12x;
/// - rmsnorm bf16 16x2048: one chunk 1.02x, W=32 1.20x;
/// - rmsnorm f32 17x257: one chunk (W=128) first, W=32 1.06x.
///
/// Checked afterwards on nine rows of no list
/// (`2026-12-03-search-decode-one-chunk-*`): the rule's picks ran first
/// in all nine; among plans without the ladder's variants one chunk beat
/// W=32 by 1.19-1.86x on rmsnorm and 1.26-1.38x on bf16 layernorm. Not
/// f32 layernorm: there W=32 beat one chunk on two of three rows; nor
/// bf16 layernorm rows shorter than the searched ones. bf16
/// residual_layernorm on [`FEW_ROWS_ONE_CHUNK_RESIDUAL_N`]. Rows
/// of more packs than that cap are left to the model: f32 rows of
/// 2304-2560 ran best at W=128 with four or five chunks.
pub(super) fn few_rows_one_chunk_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let op = problem.operator_kind()?;
    let workers = one_chunk_workers(problem, picked);
    if problem.shape.rows >= target.multiprocessors as usize
        || workers > few_rows_max_workers(op)
        || picked.layout.workers >= workers
        || !(op == Operator::Rmsnorm
            || op == Operator::Layernorm
                && problem.dtype == DType::Bf16
                && problem.shape.n >= FEW_ROWS_ONE_CHUNK_LAYERNORM_MIN_N
            || op == Operator::ResidualLayernorm
                && problem.dtype == DType::Bf16
                && sixteen_byte_rows(problem)
                && FEW_ROWS_ONE_CHUNK_RESIDUAL_N.contains(problem.shape.n))
        || picked.residency != Residency::Registers
        || picked.groups_per_row != 1
    {
        return None;
    }
    let one = one_chunk_request(pick, picked, workers, 0);
    let plan = plan_rows(problem, target, &one).ok()?;
    (plan.layout.chunks(problem.shape.n) == 1
        && plan.groups_per_row == 1
        && plan.residency == Residency::Registers)
        .then_some(one)
}

/// The rows [`saved_lse_backward_wide_instead`] widens: from the shortest
/// measured to the longest where W=1024 won (at 128256 it ran 1.7%
/// slower than W=512 on 4096 rows and tied on 1024).
const SAVED_LSE_BACKWARD_N: Span = span(16384, 100000);

/// Workers per row of the bf16 saved-lse cross-entropy backward.
const SAVED_LSE_BACKWARD_WORKERS: u32 = 1024;

/// The model's pick for bf16 cross-entropy backward from a saved lse (an
/// element-only program: each logit read once, its gradient written
/// once), on at least as many rows as multiprocessors and rows within
/// [`SAVED_LSE_BACKWARD_N`], replaced by one group of 1024 workers at the
/// pick's V. In seven H200 searches of rows of no list (16384-100000
/// wide, 1024-8192 rows; L2 cold), W=1024 V=8 ran first in all seven and
/// the model's W=512 pick 1.008-1.26x slower (4096x32000: 161 against
/// 127.5 µs, 3.25 against 4.11 TB/s). Checked afterwards (A B B A):
/// 16384x32000 616 -> 503 µs, misaligned 8192x50257 1037 -> 999. f32 is
/// left to the model: there W=1024 at its V won two of three by 0.9-2.5%
/// and lost the third by 0.9%.
pub(super) fn saved_lse_backward_wide_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    if problem.operator_kind() != Some(Operator::CrossEntropyBackward)
        || problem.dtype != DType::Bf16
        || problem.shape.rows < target.multiprocessors as usize
        || !SAVED_LSE_BACKWARD_N.contains(problem.shape.n)
        || picked.layout.workers >= SAVED_LSE_BACKWARD_WORKERS
        || picked.groups_per_row != 1
    {
        return None;
    }
    let wide = LayoutRequest {
        workers: SAVED_LSE_BACKWARD_WORKERS,
        pack: picked.layout.pack,
        unroll: 0,
        rows_per_group: 0,
        ..*pick
    };
    let plan = plan_rows(problem, target, &wide).ok()?;
    (plan.groups_per_row == 1).then_some(wide)
}

/// The shortest rmsnorm and layernorm rows [`cluster_pushed_instead`]
/// takes (the shortest measured).
const PUSHED_NORM_CLUSTER_MIN_N: usize = 65536;

/// Softmax rows shorter than the push-reduce rung's 131072 whose picked
/// plan spans a cluster: the same layout, its partials pushed (each group
/// writes its partial into every peer's shared memory: one cluster
/// barrier, no gather after it). A B B A against the unpushed plans on 18
/// rows of no list (H100, L2 warm at 1-64 rows, cold from 256;
/// `2026-12-06-softmax-pushed-*`): 1.31-2.19x at 1-64 rows (f32 1x50000
/// 6.01 -> 2.74 µs), 1.08-1.34x at 256-4096 (bf16 4096x110000 876 -> 694
/// µs). Only the push is added: asking for it before the model's pick
/// moved one-group plans (f32 4096x32768, a target shape) into clusters
/// never measured, and rmsnorm f32 2000x80000 into groups of 1024.
///
/// The same for rmsnorm and layernorm rows of 65536 and more: A B B A,
/// L2 cold-inputs, H100, 300-2000 rows of no list but a drawn one
/// (`2026-12-07-norm-clusters-under-131072-pushed-h100`): 1.035-1.144x on
/// six of six (rmsnorm f32 551x104293 221.1 -> 193.3 µs, bf16 600x70000
/// 72.5 -> 63.8; layernorm f32 800x90000 1.08x); layernorm bf16 1.14-1.17x
/// on three of three (1000x70000 123.7 -> 106.0;
/// `2026-12-07-layernorm-bf16-clusters-under-131072-pushed-h100`).
pub(super) fn cluster_pushed_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let norm = matches!(
        problem.operator_kind(),
        Some(Operator::Rmsnorm | Operator::Layernorm)
    );
    let op = problem.operator_kind() == Some(Operator::Softmax)
        || (norm && problem.shape.n >= PUSHED_NORM_CLUSTER_MIN_N);
    let wanted = op
        && problem.shape.n < PUSH_RUNG_MIN_N
        && picked.groups_per_row > 1
        && !picked.pushed_cluster_reduce;
    let pushed = LayoutRequest {
        push_cluster_reduce: true,
        ..*pick
    };
    (wanted && plan_rows(problem, target, &pushed).is_ok_and(|p| p.pushed_cluster_reduce))
        .then_some(pushed)
}

/// Softmax row lengths where [`softmax_decode_pushed_instead`] re-chooses
/// a one-group pick with the push: up to the push-reduce rung.
const DECODE_PUSH_N: Span = span(32768, PUSH_RUNG_MIN_N - 1);

/// The most rows [`softmax_decode_pushed_instead`] takes: the decode rows
/// measured (1-64).
const DECODE_PUSH_MAX_ROWS: usize = 64;

/// The most misaligned 16-bit rows [`softmax_decode_pushed_instead`]
/// spreads over the widest cluster: where it was measured faster.
const DECODE_PUSH_MISALIGNED_MAX_ROWS: usize = 16;

/// Softmax decode rows of [`DECODE_PUSH_N`] where the model picked one
/// group a row: the model's pick with the push asked for, where it spans a
/// pushed cluster. One group streams a 130-500 KB row from one SM while
/// the others idle. A B B A against the one-group picks on nine rows of no
/// list (H100, L2 warm, `2026-12-06-softmax-decode-rechosen-push-h100`):
/// 1.13-2.16x (f32 4x37000 5.98 -> 2.77 µs). Where the model already
/// spans a cluster, re-choosing lost on two of four (0.91x), so those keep
/// their layout ([`cluster_pushed_instead`]).
///
/// 16-bit rows of a length no multiple of 8 may stay in one group of
/// aligned packs even with the push asked for (the model does not see one
/// SM streaming the row alone); on at most
/// [`DECODE_PUSH_MISALIGNED_MAX_ROWS`] of them they take the widest pushed
/// cluster of 8-byte packs, the layout the model itself picks from about
/// 44000 elements: 1.11-1.85x on bf16 rows of 33333-38001 at 1-16 rows,
/// 0.52-0.87x at 32-64 (H100, L2 warm,
/// `2026-12-06-softmax-decode-misaligned-push-h100`, measured while
/// aligned packs stayed within one group). Since they reach a cluster's
/// groups the model spans that cluster itself on some such rows, in
/// 16-byte aligned packs: 1.31-1.33x over the former cluster on bf16
/// 8-16 rows (`2026-12-06-softmax-decode-misaligned-aligned-packs-h100`).
pub(super) fn softmax_decode_pushed_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    request: &LayoutRequest,
) -> Option<LayoutRequest> {
    let wanted = problem.operator_kind() == Some(Operator::Softmax)
        && DECODE_PUSH_N.contains(problem.shape.n)
        && problem.shape.rows <= DECODE_PUSH_MAX_ROWS
        && picked.groups_per_row == 1;
    if !wanted {
        return None;
    }
    let pushed = LayoutRequest {
        push_cluster_reduce: true,
        ..*request
    };
    let ModelChoice::Pick(pick) = model_choice(problem, target, &pushed).ok()? else {
        return None;
    };
    let spans_pushed_cluster = |pick: &LayoutRequest| {
        let target = with_cluster_group_threads(target, pick.cluster_group_threads).ok()?;
        plan_rows(problem, &target, pick)
            .is_ok_and(|p| p.groups_per_row > 1 && p.pushed_cluster_reduce)
            .then_some(*pick)
    };
    spans_pushed_cluster(&pick).or_else(|| {
        let misaligned = problem.dtype.size_bytes() == 2 && !sixteen_byte_rows(problem);
        if !misaligned || problem.shape.rows > DECODE_PUSH_MISALIGNED_MAX_ROWS {
            return None;
        }
        spans_pushed_cluster(&LayoutRequest {
            workers: target.max_workers(),
            pack: sixteen_byte_pack(problem.dtype) / 2,
            unroll: 0,
            rows_per_group: 0,
            aligned_packs: false,
            ..pushed
        })
    })
}

/// Cross-entropy row lengths [`few_rows_cross_entropy_cluster_instead`]
/// takes: the measured ones (40000-128000 wide).
const FEW_ROWS_CE_CLUSTER_N: Span = span(40000, 131072);

/// Row bytes from which [`few_rows_cross_entropy_cluster_instead`] takes
/// eight groups a row where they fit in three quarters of a wave (the
/// shortest row measured faster so: bf16 12x80000).
const FEW_ROWS_CE_EIGHT_GROUPS_BYTES: usize = 160_000;

/// Row bytes up to which [`few_rows_cross_entropy_cluster_instead`]'s
/// four groups are of 256 threads past one wave (the longest row
/// measured faster so: bf16 42x128000; f32 48x88000 ran 0.94x).
const FEW_ROWS_CE_SMALL_GROUPS_BYTES: usize = 256 * 1024;

/// Cross-entropy row lengths [`few_rows_cross_entropy_cluster_instead`]
/// takes past half the multiprocessors: the measured ones.
const HALF_WAVE_CE_N: Span = span(70000, 250000);

/// The widest cluster pick [`few_rows_cross_entropy_cluster_instead`]
/// replaces past half the multiprocessors: the measured ones (two to four
/// groups of 1024).
const HALF_WAVE_CE_MAX_WORKERS: u32 = 4096;

/// The forward cross-entropy on rows of [`FEW_ROWS_CE_CLUSTER_N`], fewer
/// rows than half the multiprocessors: a cluster a row, partials
/// pushed, its groups as many as fit in one and a half waves: eight of
/// 512 on rows of at least [`FEW_ROWS_CE_EIGHT_GROUPS_BYTES`] (within
/// three quarters of a wave), else four (of 256 threads past one wave on
/// rows of at most [`FEW_ROWS_CE_SMALL_GROUPS_BYTES`], else of 512), else
/// two of 1024. The model gives each row one group of 1024, one SM
/// reading the whole row while most SMs idle. Groups of 256 against 512
/// past one wave (`2026-12-05-ce-decode-256-groups-h200`): 1.01-1.14x on
/// six rows of 104-256 KB at 35-46 rows, 1.03x and 0.94x on rows of
/// 350-400 KB; within one wave, and at eight groups, 256 lost
/// (0.79-0.92x). A B B A on rows of no list (L2 warm,
/// `2026-12-05-ce-decode-clusters-h200`), the model's pick against four
/// groups: 8x128000 1.78-1.82x, 24x100000 bf16 1.61x, 32x128000
/// 1.31-1.32x, 40x60000 f32 1.09x, 48x65536 bf16 1.21x; at 64 rows four
/// groups lost (64x64000 f32 0.90x), two won (1.05x f32, 1.18x bf16).
/// Eight against four: 1.05-1.42x at 4-12 rows of 160-512 KB, 0.82-0.94x
/// on 16-32 rows. Misaligned rows take the same cluster in aligned packs
/// (H200 A B B A, L2 cold-inputs, `2026-12-06-ce-decode-misaligned-cluster-h200`,
/// against the one group a row the model picks: bf16 40x100003 10.42 ->
/// 7.86 µs, 24x120005 10.50 -> 6.77, 20x60005 8.09 -> 5.18, f32 24x70001
/// 10.32 -> 6.75; the cluster without aligned packs 1.39x on 24x120005);
/// in four groups only, as measured.
/// Left to the model: 96 and 128 rows (0.63-0.78x in either cluster), rows
/// of 32000 (0.81-1.02x at 32 and 64 rows), and f16 (not measured).
///
/// Past half the multiprocessors (up to as many rows), rows of
/// [`HALF_WAVE_CE_N`] where the model spans a cluster of 1024-thread
/// groups take four pushed groups of 256 a row: four
/// quarter-size groups on four SMs, at most a wave of small groups, where
/// the model's 2-4 full groups leave 2-4 rows an SM behind one exchange.
/// A B B A, L2 cold-inputs, H100, rows of no list
/// (`2026-12-07-ce-rows-past-half-the-sms-cluster-picks-h100`): 1.04-1.41x
/// on eight of eight (f32 75x120000 23.3 -> 16.5 µs, bf16 100x180000 20.4
/// -> 17.0); before, on the five such picks of
/// `2026-12-07-ce-rows-past-half-the-sms-{in-small-groups,narrower-span}-h100`,
/// 1.04-1.32x. Against the model's one group of 1024 a row the same
/// groups ran at par (0.96-1.14x), so those keep it, misaligned rows
/// too: 0.97-1.13x on eight (bf16 82x100890, drawn, 11.20 -> 9.96 µs,
/// 120x131071 0.972x; `2026-12-07-ce-misaligned-rows-past-half-the-sms-
/// h100`, `2026-12-07-ce-misaligned-rows-past-half-sms-cluster-h100`).
/// Misaligned cluster picks take the groups in aligned packs: 1.02-1.24x
/// on four (bf16 100x150001 18.5 -> 15.0 µs; read element by element,
/// bf16 1.11x, f32 1.107x against aligned 1.021x on one row). Wider
/// clusters were not measured.
pub(super) fn few_rows_cross_entropy_cluster_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let Shape { rows, n } = problem.shape;
    let sms = target.multiprocessors as usize;
    let forward_ce = [Operator::CrossEntropy, Operator::CrossEntropyWithLse];
    if (sms / 2 + 1..=sms).contains(&rows) {
        let shifted = !sixteen_byte_rows(problem);
        let wanted = problem
            .operator_kind()
            .is_some_and(|op| forward_ce.contains(&op))
            && matches!(problem.dtype, DType::F32 | DType::Bf16)
            && HALF_WAVE_CE_N.contains(n)
            && picked.groups_per_row > 1
            && picked.layout.workers <= HALF_WAVE_CE_MAX_WORKERS;
        return wanted.then(|| pushed_cluster(problem, target, pick, (4, 256), 4, shifted))?;
    }
    if !one_group_decode_pick(problem, target, picked, &forward_ce)
        || !FEW_ROWS_CE_CLUSTER_N.contains(n)
    {
        return None;
    }
    let row_bytes = n * problem.dtype.size_bytes();
    let (groups, threads) =
        if 4 * 8 * rows <= 3 * sms && row_bytes >= FEW_ROWS_CE_EIGHT_GROUPS_BYTES {
            (8, 512)
        } else if 2 * 4 * rows <= 3 * sms {
            // Past one wave of four groups, groups of 256 (Quack's size)
            // where each thread's share of the row stays small.
            let small = 4 * rows > sms && row_bytes <= FEW_ROWS_CE_SMALL_GROUPS_BYTES;
            (4, if small { 256 } else { 512 })
        } else {
            (2, 1024)
        };
    // Misaligned rows were measured in four groups only (20-40 rows); in
    // one group of aligned packs 64x50257 ran 0.95x of scalar packs.
    let shifted = !sixteen_byte_rows(problem);
    if shifted && groups != 4 {
        return None;
    }
    // Rows in two groups of 1024: a worker's whole share of the row loaded
    // in one unrolled step where eight stripes cover it and four do not
    // (U=8 against U=4, H100 A B B A, L2 cold-inputs: f32 1.07-1.11x on
    // 52-64 rows of 44000-64000, `2026-12-06-ce-decode-f32-cluster-sizes-h100`;
    // f32 1.07-1.10x and bf16 1.09-1.16x on 54-64 rows of 47000-128256,
    // `2026-12-06-ce-decode-unroll-h100`).
    let stripes = n.div_ceil((groups * threads * sixteen_byte_pack(problem.dtype)) as usize);
    let unroll = if groups == 2 && stripes > 4 && stripes <= 8 {
        8
    } else {
        4
    };
    pushed_cluster(problem, target, pick, (groups, threads), unroll, shifted)
}

/// `pick` as a pushed cluster of `groups` groups of so many threads a row
/// in 16-byte packs unrolled by `unroll`, where the mapper spans it so.
fn pushed_cluster(
    problem: &Problem,
    target: &Target,
    pick: &LayoutRequest,
    (groups, threads): (u32, u32),
    unroll: u32,
    aligned_packs: bool,
) -> Option<LayoutRequest> {
    let cluster = LayoutRequest {
        workers: groups * threads,
        pack: sixteen_byte_pack(problem.dtype),
        unroll,
        rows_per_group: 0,
        cluster_group_threads: threads,
        push_cluster_reduce: true,
        split_groups: target.needs_split_groups(groups * threads),
        aligned_packs,
        ..*pick
    };
    let target = with_cluster_group_threads(target, threads).ok()?;
    let plan = plan_rows(problem, &target, &cluster).ok()?;
    (plan.groups_per_row == groups && plan.pushed_cluster_reduce).then_some(cluster)
}

/// Residual layernorm row lengths [`residual_layernorm_pushed_cluster_instead`]
/// takes: the measured ones up to the push-reduce rung.
const RESIDUAL_PUSHED_CLUSTER_N: Span = span(26000, 32767);

/// Residual layernorm on 16-byte aligned rows of
/// [`RESIDUAL_PUSHED_CLUSTER_N`] larger than the L2, where the model picks
/// a fenced cluster (two register tiles a row do not fit a group of 512):
/// a pushed cluster of eight groups of 256 in 16-byte packs, the layout
/// the push-reduce rung gives longer rows. The model's space has no push
/// below that rung. A B B A, L2 cold-inputs, H100, rows of no list but a
/// drawn one (`2026-12-07-residual-layernorm-fenced-cluster-picks-h100`):
/// 1.20-1.62x on seven of seven, 900-2000 rows of 26000-31000 (the drawn
/// bf16 1839x28352 250.8 -> 157.0 µs, torch.compile 152.8 on its card;
/// f32 1000x28000 195.5 -> 156.2), fenced picks of narrow packs and of
/// 256-thread groups alike (bf16 1300x31000 1.24x). A hinted stream beat
/// the fenced picks on one row of two but lost to the push
/// (`2026-12-07-residual-layernorm-long-rows-hinted-stream-h100`).
pub(super) fn residual_layernorm_pushed_cluster_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let wanted = problem.operator_kind() == Some(Operator::ResidualLayernorm)
        && RESIDUAL_PUSHED_CLUSTER_N.contains(problem.shape.n)
        && past_l2(problem)
        && sixteen_byte_rows(problem)
        && picked.groups_per_row > 1
        && !picked.pushed_cluster_reduce;
    let unroll = problem
        .shape
        .n
        .div_ceil(2048 * sixteen_byte_pack(problem.dtype) as usize);
    wanted.then(|| pushed_cluster(problem, target, pick, (8, 256), unroll as u32, false))?
}

/// Rows this short take one thread a row ([`tiny_rows_one_thread_instead`]).
pub(crate) const TINY_ROW_N: usize = 16;

/// f32 and bf16 rows of at most [`TINY_ROW_N`] elements, enough of them
/// for a 256-row group on every SM: one thread a row, the widest pack (up
/// to 8) that divides the row, no exchange. The model's space starts at
/// W=8, which leaves 8 lanes a 4-byte load each and a three-level shuffle. Searches
/// of rows in no list (2026-12-03-search-short-rows-f32-h200, L2 cold,
/// sum and softmax at 262144x4, 131072x8, 65536x16): W=1 won or came
/// within 9% in all six; the W=8 picks ran 1.13-3.7x slower (sum 131072x8
/// 4.58 against 2.65 µs). bf16 (-bf16-h200, the same shapes): this pack
/// within 1.5% of the best in all six, the W=8 picks 1.13-4.9x slower.
/// Other operators and f16 are unmeasured.
pub(super) fn tiny_rows_one_thread_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let Shape { rows, n } = problem.shape;
    if !matches!(
        problem.operator_kind(),
        Some(Operator::Sum | Operator::Softmax)
    ) || !matches!(problem.dtype, DType::F32 | DType::Bf16)
        || n > TINY_ROW_N
        || rows < 256 * target.multiprocessors as usize
        || picked.layout.workers == 1
    {
        return None;
    }
    let one = LayoutRequest {
        workers: 1,
        // The widest pack that keeps every row start aligned to it.
        pack: [8, 4, 2, 1].into_iter().find(|&v| n % v == 0).unwrap_or(1) as u32,
        unroll: 0,
        rows_per_group: 0,
        ..*pick
    };
    plan_rows(problem, target, &one).ok().map(|_| one)
}

/// 16-bit softmax rows where the online normalizer runs in registers
/// ([`online_register_instead`]).
const ONLINE_SOFTMAX_N: Span = span(18432, 32767);

/// 16-bit softmax with the online normalizer (the variant ladder's, on
/// rows of 18432-32767 larger than the L2): a register plan of at most 8
/// packs a worker (W=512 there), where the model, which prices the online
/// normalizer as holding nothing, picked 208-slot tiles (163 registers)
/// and the rule of [`hinted_stream_instead`] a streamed plan that ran at
/// 2.5-3.1 TB/s. The one reduction phase keeps the tile at 61-64
/// registers, two groups per SM. A B B A on rows of no list
/// (`2026-12-04-softmax-bf16-online-h200`), streamed -> online: 12288x18432
/// 334.1 -> 262.8 µs, 4096x20001 120.6 -> 107.0, 6144x26000 204.3 ->
/// 182.3, 8192x30720 404.6 -> 284.3.
pub(super) fn online_register_instead(
    problem: &Problem,
    target: &Target,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let n = problem.shape.n;
    if problem.operator_kind()? != Operator::Softmax
        || problem.dtype.size_bytes() != 2
        || !pick.online_normalizer
        || !ONLINE_SOFTMAX_N.contains(n)
        || !past_l2(problem)
    {
        return None;
    }
    let pack = sixteen_byte_pack(problem.dtype);
    let online = LayoutRequest {
        workers: n.div_ceil(8 * pack as usize).next_power_of_two().min(1024) as u32,
        pack,
        unroll: 4,
        rows_per_group: 1,
        residency: ResidencyRequest::Registers,
        ..*pick
    };
    plan_rows(problem, target, &online).ok().map(|_| online)
}

/// The model's register pick replaced by a streamed plan with re-read hints
/// (see [`LayoutRequest::reread_hints`]), where the H200 measured that faster
/// in paired replays with all three peers:
/// rmsnorm in f32 and bf16 and softmax in bf16, one group per row and a
/// 64-slot register plan, on problems larger than the L2. There the
/// streamed plan holds 32-46 registers instead of 108-128 and its re-reads
/// stay in L2: rmsnorm bf16 1.024-1.055x on 32768x4096, 16384x8192 and
/// 4096x32768, rmsnorm f32 4096x32768 1.106x, softmax bf16 1.040-1.068x.
/// Left out, as measured slower: layernorm (0.78-1.04x, slower on two of
/// three bf16 shapes and on f32 4096x32768); softmax f32 was not measured
/// with the automatic unroll. The cost model prices re-reads as DRAM
/// traffic and cannot see this, so it is a rule beside the model, not in it.
pub(super) fn hinted_stream_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let op = problem.operator_kind()?;
    let measured_faster = match op {
        Operator::Rmsnorm => true,
        // A packed softmax tile needs 64 registers, not 124: it stays. The
        // plan's packing, not the request's: a row of partial chunks is
        // not packed.
        Operator::Softmax => problem.dtype == DType::Bf16 && !picked.packed_resident,
        _ => false,
    };
    let wide_tile = picked.groups_per_row == 1 && picked.resident_slots >= WIDE_SLOT_PLAN;
    // bf16 softmax rows whose register tiles pack only in whole chunks:
    // any register pick, one group or a cluster.
    let long_softmax = long_softmax_stream(problem);
    // Measured on the H200 only; other targets keep the model's pick.
    if !measured_faster
        || picked.residency != Residency::Registers
        || !(wide_tile || long_softmax)
        || !past_l2(problem)
    {
        return None;
    }
    // Two 16-byte packs per worker and stripe, as measured: W=256 on rows of
    // 4096 bf16, 512 on 8192, at most one full group on longer rows.
    let (workers, pack, unroll) = if long_softmax {
        (LONG_SOFTMAX_STREAM_W, sixteen_byte_pack(problem.dtype), 4)
    } else {
        let pack = picked.layout.pack;
        (
            two_packs_per_worker(problem.shape.n, pack, target),
            pack,
            pick.unroll,
        )
    };
    if !long_softmax && partial_stripe_keeps_registers(problem, workers * pack) {
        return None;
    }
    let streamed = LayoutRequest {
        workers,
        pack,
        unroll,
        rows_per_group: 0,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        ..*pick
    };
    plan_rows(problem, target, &streamed).ok().map(|_| streamed)
}

/// bf16 softmax rows streamed by [`hinted_stream_instead`] whatever the
/// model's register pick, but a packed tile: from 32769 a register tile
/// is packed only where the row splits into whole chunks, and unpacked
/// it holds one group per SM (4096x36000 109 registers); the model's
/// cluster picks from 58000 ran slower still. In
/// [`LONG_SOFTMAX_STREAM_W`]-worker groups of 16-byte packs at U=4:
/// against the old picks, A B B A, L2 cold (2026-12-04-softmax-bf16-
/// long-stream-h200): 2048x50257 169.8 -> 140.9 µs, 2048x60001 (a
/// cluster of 4) 310.5 -> 164.1, 4096x36000 212.3 -> 210.9, 4096x40000
/// 240.5 -> 234.8.
const LONG_SOFTMAX_STREAM_N: Span = span(32769, 65535);

/// Is this a bf16 softmax of [`LONG_SOFTMAX_STREAM_N`] (streamed by
/// [`hinted_stream_instead`] past the L2)?
pub(super) fn long_softmax_stream(problem: &Problem) -> bool {
    problem.operator_kind() == Some(Operator::Softmax)
        && problem.dtype == DType::Bf16
        && LONG_SOFTMAX_STREAM_N.contains(problem.shape.n)
}

/// Workers of [`LONG_SOFTMAX_STREAM_N`]'s streamed plan: W=1024 (one
/// group per SM) ran 1.20-1.45x slower than W=512 on all five rows tried
/// (8192x33000 483.8 against 334.4 µs, 2048x62000 218.1 against 172.1).
const LONG_SOFTMAX_STREAM_W: u32 = 512;

/// The power-of-two W giving each worker two packs of `pack` per stripe of
/// a row of `n`, within one warp and one full group.
fn two_packs_per_worker(n: usize, pack: u32, target: &Target) -> u32 {
    let per_two_packs = (n as u32 / (2 * pack)).max(target.warp_size);
    (1u32 << per_two_packs.ilog2()).min(target.max_threads_per_group)
}

/// Does this problem take the streamed plan of [`whole_row_stream_instead`]
/// (on the H200)? The operators and dtypes searched for it: rmsnorm
/// f32 (bf16 streams by [`hinted_stream_instead`]), layernorm and softmax
/// f32 and bf16.
fn streams_whole_row(problem: &Problem) -> bool {
    let searched = match problem.operator_kind() {
        Some(Operator::Rmsnorm) => problem.dtype == DType::F32,
        Some(Operator::Layernorm | Operator::Softmax) => {
            matches!(problem.dtype, DType::F32 | DType::Bf16)
        }
        _ => false,
    };
    searched && WHOLE_ROW_STREAM_N.contains(problem.shape.n) && past_l2(problem)
}

/// Rows x N tiles at most this large keep a norm's input and output
/// within the H200's 50 MB L2: the problems of one or a few waves where
/// [`early_columns_instead`] was measured (tiles of 1-16 MiB).
const EARLY_COLUMNS_MAX_BYTES: u64 = 24 << 20;

/// Output phases of at least this many chunks wait on one column round
/// trip a chunk without early columns.
const EARLY_COLUMNS_MIN_CHUNKS: u32 = 3;

/// The model's register pick for rmsnorm or layernorm, on at least as many
/// rows as multiprocessors and a tile within [`EARLY_COLUMNS_MAX_BYTES`],
/// with the weight and bias of every chunk (at most 8) loaded before the
/// reduction, where its output phase has at least
/// [`EARLY_COLUMNS_MIN_CHUNKS`] chunks. Without them the compiler issues
/// each chunk's column load after the previous chunk's store (SASS of
/// rmsnorm bf16 W=32 V=8 on 1024-wide rows: three column round trips in
/// turn), a wait the groups of one or a few waves cannot hide. The
/// model's picks in the searches of 2026-12-03 (L2 cold):
/// - rmsnorm bf16 512x1024 2.76 -> 2.37 µs, 1024x1536 4.59 -> 3.23,
///   2048x2048 5.97 -> 5.91, 2048x4096 10.90 -> 10.65;
/// - layernorm bf16 512x1024 2.84 -> 2.52, 2048x4096 15.43 -> 12.16.
///
/// On a pick of two chunks it cost registers and time (layernorm bf16
/// 512x2560 W=256: 3.89 -> 4.19 µs), hence the chunk floor; on fewer rows
/// than multiprocessors the variant ladder decides.
pub(super) fn early_columns_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    if !norm_register_pick_on_many_rows(problem, target, picked)
        || row_tile_bytes(problem) > EARLY_COLUMNS_MAX_BYTES
        || picked.early_columns > 0
        || (picked.layout.chunks(problem.shape.n) as u32) < EARLY_COLUMNS_MIN_CHUNKS
    {
        return None;
    }
    let early = LayoutRequest {
        early_columns: 8,
        ..*pick
    };
    let plan = plan_rows(problem, target, &early).ok()?;
    (plan.early_columns >= EARLY_COLUMNS_MIN_CHUNKS).then_some(early)
}

/// An H200 register pick for rmsnorm or layernorm on at least as many rows
/// as multiprocessors: where the early-columns and rmsnorm widening rules were
/// measured (on fewer rows the variant ladder decides).
fn norm_register_pick_on_many_rows(problem: &Problem, target: &Target, picked: &Plan) -> bool {
    matches!(
        problem.operator_kind(),
        Some(Operator::Rmsnorm | Operator::Layernorm)
    ) && problem.shape.rows >= target.multiprocessors as usize
        && picked.residency == Residency::Registers
}

/// bf16 residual_layernorm rows [`one_chunk_instead`] takes on many rows:
/// the measured ones (304-496), as for fewer rows than SMs.
const SHORT_RESIDUAL_ONE_CHUNK_N: Span = span(257, 512);

/// The widest worker count a one-chunk norm plan takes: a block of 256
/// threads, the width at which the short-row searches measured one chunk
/// a worker best.
const ONE_CHUNK_MAX_WORKERS: u32 = 256;

/// The model's register pick for rmsnorm on short rows replaced by one
/// chunk a worker (W the next power of two over the row's
/// packs, at most [`ONE_CHUNK_MAX_WORKERS`], the pick's V), on at least
/// as many rows as multiprocessors and at most one wave of 256-thread
/// groups. Each worker then issues one load per phase, and a problem of
/// a wave or two has little to overlap the narrow pick's chunks with. The
/// searches of 2026-12-03 (L2 cold, the model's picks with early
/// columns), against the best:
/// - rmsnorm bf16 512x1024: one chunk (W=128 V=8) 1.04x, the pick (W=32,
///   four chunks) 1.13x;
/// - rmsnorm bf16 1024x1536: one chunk (W=256 V=8) first, the pick (W=32,
///   six chunks) 1.04x;
/// - held out, measured with the rule: rmsnorm bf16 512x896 2.06-2.12 µs
///   against the pick's 2.68.
///
/// Not layernorm: one chunk won at 512x1024 (1.006x of the best, the pick
/// 1.08x) but lost on the held-out 512x768 (2.35 µs against the pick's
/// 2.19). On rows of 4096 one chunk lost (W=512: 1.04-1.41x), hence the
/// width cap.
///
/// bf16 residual_layernorm 16-byte rows of [`SHORT_RESIDUAL_ONE_CHUNK_N`]
/// on at least as many rows as SMs take one chunk a worker in groups of
/// 256 threads (the model's one warp a row reads them in two chunks). A B
/// B A, L2 cold-inputs, H100, rows of no list but a drawn one: 1.10-1.16x
/// on six of six of 605-10000 rows (the drawn 605x304 2.85 -> 2.47 µs,
/// torch.compile 2.60 on its card; 2000x352 4.09 -> 3.62;
/// `2026-12-07-short-norm-rows-past-a-wave-one-chunk-h100`,
/// `2026-12-07-short-16-bit-layernorm-rows-past-a-wave-one-chunk-h100`).
/// bf16 layernorm, in the second campaign's bar with it, ran 1.07-1.15x on
/// four rows and 0.80x on 20000x384 (the model's W=16 with early
/// columns), so the bar was missed and layernorm keeps the model's pick;
/// rmsnorm past a wave and f32 ran 0.97-1.01x.
pub(super) fn one_chunk_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let workers = one_chunk_workers(problem, picked).max(32);
    // One wave of 256-thread groups, the searches' range (512-1024 rows).
    let one_wave = target.multiprocessors as usize
        * (target.max_threads_per_multiprocessor / ONE_CHUNK_MAX_WORKERS) as usize;
    let short_residual = problem.operator_kind() == Some(Operator::ResidualLayernorm)
        && problem.dtype == DType::Bf16
        && SHORT_RESIDUAL_ONE_CHUNK_N.contains(n)
        && sixteen_byte_rows(problem);
    let rmsnorm = problem.operator_kind() == Some(Operator::Rmsnorm) && rows <= one_wave;
    if rows < target.multiprocessors as usize
        || picked.residency != Residency::Registers
        || !(rmsnorm || short_residual)
        || workers > ONE_CHUNK_MAX_WORKERS
        || picked.layout.chunks(n) < 2
    {
        return None;
    }
    let group_rows = if short_residual {
        ONE_CHUNK_MAX_WORKERS / workers
    } else {
        1
    };
    let one = one_chunk_request(pick, picked, workers, group_rows);
    let plan = plan_rows(problem, target, &one).ok()?;
    (plan.layout.chunks(n) == 1 && plan.residency == Residency::Registers).then_some(one)
}

/// bf16 rmsnorm rows of this length take one group of 512
/// ([`rmsnorm_wider_group_instead`]).
const WIDE_BF16_RMSNORM_N: Span = span(13000, 16384);

/// f32 rmsnorm rows of this length on one wave of rows take one group of
/// 1024 a row ([`rmsnorm_wider_group_instead`]).
const ONE_WAVE_RMSNORM_N: Span = span(20000, 28000);

/// The model's pick of one narrow group a row for rmsnorm rows in their
/// hundreds to thousands, replaced by one wider group in 16-byte packs
/// holding the row, every chunk in flight. A few narrow groups an SM keep
/// too few loads in flight, which the model (in-flight bytes over the
/// plan's register tile) does not see.
///
/// - bf16 rows of [`WIDE_BF16_RMSNORM_N`] picked at W=256 (seven chunks a
///   worker, four groups an SM), on a tile between
///   [`EARLY_COLUMNS_MAX_BYTES`] and [`PAST_L2_BYTES`]: one group of 512
///   (W=512 V=8 U=4). A B B A, L2 cold-inputs, rows of no list:
///   1.10-1.27x on the four such tiles of 1000-2200 rows (1000x16000
///   30.3 -> 23.9 µs; H100, `2026-12-07-rmsnorm-bf16-wide-past-l2-w512-
///   h100`) and 1.17-1.34x on 1300x15000 and 1800x14000 (H200,
///   `2026-12-06-rmsnorm-bf16-wide-past-l2-h200`); past the L2
///   (3000x14336, 86 MB) it ran at par (0.99x), as did 2600x12800
///   (0.996x).
/// - f32 rows of [`ONE_WAVE_RMSNORM_N`] on one to two rows an SM, picked
///   at W=128-256 (20-110 chunks a worker): one group of 1024. A B B A, L2
///   cold-inputs, H100, rows of no list and a drawn one
///   (`2026-12-07-norm-rows-of-one-wave-in-full-groups-h100`): 200x20000
///   17.9 -> 12.3 µs, 245x24768 29.4 -> 20.8 (the drawn problem; Quack
///   19.1), 260x28000 53.8 -> 24.6; on six fresh rows of 140-255 x
///   21000-27500 against the narrow picks with every chunk's columns
///   early, 1.26-1.69x (140x24000 21.2 -> 12.5;
///   `2026-12-07-one-wave-rmsnorm-f32-full-group-fresh-rows-h100`). That
///   first campaign's wider class missed its bar: f32 rmsnorm rows of
///   12000-16000 and layernorm f32 ran at par (0.98-1.02x), softmax
///   slower (0.83-0.87x), bf16 mixed (0.93-1.19x); they keep the model's
///   pick.
pub(super) fn rmsnorm_wider_group_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    let Shape { rows, n } = problem.shape;
    if !norm_register_pick_on_many_rows(problem, target, picked)
        || problem.operator_kind() != Some(Operator::Rmsnorm)
        || picked.groups_per_row != 1
        || picked.layout.workers > 256
    {
        return None;
    }
    let tile = row_tile_bytes(problem);
    let workers: u32 = match problem.dtype {
        DType::Bf16
            if WIDE_BF16_RMSNORM_N.contains(n)
                && (EARLY_COLUMNS_MAX_BYTES + 1..PAST_L2_BYTES).contains(&tile)
                && picked.layout.workers == 256 =>
        {
            512
        }
        DType::F32
            if ONE_WAVE_RMSNORM_N.contains(n) && rows <= 2 * target.multiprocessors as usize =>
        {
            1024
        }
        _ => return None,
    };
    let pack = sixteen_byte_pack(problem.dtype);
    let wide = LayoutRequest {
        workers,
        pack,
        unroll: n.div_ceil((workers * pack) as usize) as u32,
        rows_per_group: 0,
        early_columns: 0,
        ..*pick
    };
    let plan = plan_rows(problem, target, &wide).ok()?;
    (plan.groups_per_row == 1 && plan.residency == Residency::Registers).then_some(wide)
}

/// The workers that hold a row in one chunk of `picked`'s packs: the next
/// power of two over the row's packs.
fn one_chunk_workers(problem: &Problem, picked: &Plan) -> u32 {
    let packs = problem.shape.n.div_ceil(picked.layout.pack.max(1) as usize);
    packs.next_power_of_two() as u32
}

/// `pick` at `workers` with `picked`'s V, one chunk a worker.
fn one_chunk_request(
    pick: &LayoutRequest,
    picked: &Plan,
    workers: u32,
    rows_per_group: u32,
) -> LayoutRequest {
    LayoutRequest {
        workers,
        pack: picked.layout.pack,
        unroll: 1,
        rows_per_group,
        ..*pick
    }
}

/// Can a row be read in 16-byte vectors (N a multiple of 16 bytes'
/// elements, so every row starts on a 16-byte boundary)?
fn sixteen_byte_rows(problem: &Problem) -> bool {
    let per_16 = sixteen_byte_pack(problem.dtype) as usize;
    vector_access(problem.dtype, per_16, problem.shape.n).is_some()
}

/// The elements of one 16-byte pack of `dtype` (V of a 16-byte access).
fn sixteen_byte_pack(dtype: DType) -> u32 {
    16 / dtype.size_bytes() as u32
}

/// Is the problem's rows x N tile at least [`PAST_L2_BYTES`] (where the
/// streamed rules and the cold path's fewer groups were measured)?
pub fn past_l2(problem: &Problem) -> bool {
    row_tile_bytes(problem) >= PAST_L2_BYTES
}

/// Bytes of one rows x N tile in the problem's storage dtype.
fn row_tile_bytes(problem: &Problem) -> u64 {
    problem.shape.rows as u64 * problem.shape.n as u64 * problem.dtype.size_bytes() as u64
}

/// The model's pick on rows of 4096-8192 larger than the L2 replaced by a
/// streamed plan with re-read hints that loads the whole row in one chunk
/// per pass (16-byte packs, U=4: at most four packs a worker), as
/// Inductor's looped kernels do: rmsnorm on W = N/(2V) (two packs a
/// worker), layernorm and softmax on stripes of at most 2048 elements
/// (W = min(N/(2V), 2048/V)), layernorm with one-pass moments (two passes,
/// like Inductor's Welford loop). The searches
/// (2026-11-30-t1s-*-h200, 18-19 candidates each, in registers and
/// streamed) put these first or within 0.3% of first (U=2 and U=4 alike
/// where fewer stripes exist), against the model's picks:
/// - rmsnorm f32: 249.3 µs against 260.3 (32768x4096), 251.3 against
///   254.5 (16384x8192);
/// - layernorm f32: 249.2 against 258.1-260.6, 251.7 against 255.4;
///   bf16: 127.2 against 132.7, 128.7 against 132.3;
/// - softmax f32: 249.3 against 261.1, 252.5 against 260.3; bf16
///   16384x8192 127.8 against the 64-slot rule's 129.9.
///
/// The same plans in registers were 3-5% slower: streaming, not the
/// width, is the gain. On 4096x32768 streamed W=512 re-reads past the L2
/// (four groups a multiprocessor, 67 MB in flight; 377 against 274-278 µs),
/// so the rule stops at 8192. The model prices re-reads as DRAM traffic
/// and cannot see this.
pub(super) fn whole_row_stream_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    if !streams_whole_row(problem) || picked.groups_per_row != 1 {
        return None;
    }
    const STRIPE_ELEMENTS: u32 = 2048;
    let pack = sixteen_byte_pack(problem.dtype);
    let two_packs = two_packs_per_worker(problem.shape.n, pack, target);
    let workers = match problem.operator_kind()? {
        Operator::Rmsnorm => two_packs,
        _ => two_packs.min(STRIPE_ELEMENTS / pack),
    };
    if partial_stripe_keeps_registers(problem, workers * pack) {
        return None;
    }
    let streamed = LayoutRequest {
        workers,
        pack,
        unroll: 4,
        rows_per_group: 0,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        ..*pick
    };
    plan_rows(problem, target, &streamed).ok()?;
    // Two packs a worker (rows of 4096): layernorm keeps its hinted loads
    // ordered, the kernels it won these searches with. Read-only loads let
    // ptxas hoist the re-read phase's loads for 3-4 registers more, a group
    // fewer per SM: 264.8 against 250.3 µs in f32, 131.7 against 126.9 in
    // bf16; promising the old occupancy instead spilled
    // in f32 (253.4) and only tied in bf16 (126.5). softmax and
    // rmsnorm stay at 28-32 registers either way (within 0.2%).
    let two_packs_a_worker = problem.shape.n == 2 * (workers * pack) as usize;
    let ordered = two_packs_a_worker && problem.operator_kind() == Some(Operator::Layernorm);
    Some(LayoutRequest {
        ordered_hinted_loads: ordered || pick.ordered_hinted_loads,
        ..streamed
    })
}

/// Does a 16-bit row of a partial stripe (`stripe` = W x V elements) of
/// a streamed plan keep the model's register pick? Where measured so (H100
/// A B B A, L2 cold-inputs, rows of no list):
/// - layernorm rows of [`WHOLE_ROW_STREAM_N`]: 1.08-3.11x on six, 0.995x
///   on a whole-stripe one (2026-12-07-whole-row-stream-{ragged-rows,
///   ragged-bf16,bf16-even-and-ragged}-h100);
/// - aligned softmax rows of [`RAGGED_SOFTMAX_REGISTER_N`]: 1.18-1.55x on
///   seven, 0.95-0.97x on three past it (2026-12-07-softmax-bf16-{ragged-
///   rows-under-5632,stream-line-under-5632}-h100);
/// - rmsnorm and softmax rows of [`PARTIAL_STRIPE_REGISTER_N`] (the
///   hinted stream's W=1024): 1.03-1.67x on ten of twelve, 0.94-0.97x on
///   two (22000, 26000); whole stripes (16384, 24576, 32768) and f32 kept
///   the stream (0.95-0.99x) (2026-12-07-hinted-stream-{rows-between-
///   powers-of-two,bf16-whole-stripes}-h100). The stream's unroll is not
///   the cause: U covering the row in one chunk ran as slowly
///   (`-one-chunk-a-row-`).
///
/// Checked against the former defaults on eight fresh rows: 1.003-1.66x
/// (2026-12-07-rules-of-the-day-bf16-partial-stripes-h100). Other rows
/// keep the stream: past 40000 it ran 1.04-1.19x faster; below 16385 the
/// register pick ran 0.97-1.42x, no line yet
/// (`-hinted-stream-partial-stripes-outside-16385-40000-`).
fn partial_stripe_keeps_registers(problem: &Problem, stripe: u32) -> bool {
    let n = problem.shape.n;
    if problem.dtype.size_bytes() != 2 || n.is_multiple_of(stripe as usize) {
        return false;
    }
    match problem.operator_kind() {
        Some(Operator::Layernorm) => WHOLE_ROW_STREAM_N.contains(n),
        Some(Operator::Softmax) if RAGGED_SOFTMAX_REGISTER_N.contains(n) => {
            sixteen_byte_rows(problem)
        }
        Some(Operator::Rmsnorm | Operator::Softmax) => PARTIAL_STRIPE_REGISTER_N.contains(n),
        _ => false,
    }
}

/// Aligned 16-bit softmax rows of a partial whole-row-stream stripe that
/// keep the register pick ([`partial_stripe_keeps_registers`]). The
/// stream's time jumps at the end: 449 µs on 40000x5400, 276 on
/// 38000x5480, against 285-297 for the register plans of both.
const RAGGED_SOFTMAX_REGISTER_N: Span = span(4097, 5400);

/// Rmsnorm and softmax rows of a partial hinted-stream stripe that keep
/// the register pick ([`partial_stripe_keeps_registers`]): rows of
/// 16900-40000 measured.
const PARTIAL_STRIPE_REGISTER_N: Span = span(16385, 40000);

/// A whole-row stream of the norms whose row inputs take 128 KiB or more
/// a row, in one 1024-thread group of at most 8 packs a worker: one
/// group per multiprocessor (occupancy cap 1, so L1 holds the row for its
/// re-reads), promised to the compiler (`__launch_bounds__(1024, 1)`:
/// 62-64 registers instead of 32, so a phase's eight loads are in flight
/// at once, as in Inductor's kernel), with batched loads. A/A with all
/// three peers: rmsnorm f32 4096x32768 252.6 µs against 263.8
/// (`2026-12-01-cpb-rms-aa-h200`), layernorm f32 258.1 against 268.4
/// (`-cpb-ln-aa-`), residual_layernorm bf16 269.5 against 284.7. Rows of 64 KiB (rmsnorm, layernorm, softmax
/// bf16) and softmax f32 ran slower so.
pub(super) fn one_row_per_multiprocessor(
    problem: &Problem,
    target: &Target,
    request: LayoutRequest,
) -> LayoutRequest {
    let norm = matches!(
        problem.operator_kind(),
        Some(Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm)
    );
    let n = problem.shape.n as u64;
    let row_input_bytes =
        problem.program.row_inputs().count() as u64 * n * problem.dtype.size_bytes() as u64;
    let per_chunk = request.workers as u64 * request.pack as u64;
    let whole_row_group = request.workers == target.max_threads_per_group
        && per_chunk > 0
        && n.is_multiple_of(per_chunk)
        && n / per_chunk <= 8;
    if target.name == "h200"
        && norm
        && request.residency == ResidencyRequest::Stream
        && row_input_bytes >= 128 * 1024
        && whole_row_group
    {
        LayoutRequest {
            occupancy_cap: 1,
            occupancy: 1,
            batch_loads: true,
            ..request
        }
    } else {
        request
    }
}

/// How far over the next occupancy step's budget the compiler's count may
/// be for the promise to be worth a compile: rmsnorm bf16 4096x131072 went
/// from 71 to the budget of 64 registers (1.11x) without spilling and ran
/// 659 -> 599 µs; softmax (80, 1.25x) and layernorm (117) spilled under the
/// same promise and slowed 27-38%.
const OCCUPANCY_STEP_SLACK: f64 = 1.15;

/// The occupancy promise worth trying once the compiler's register count
/// for a plan is known: one more group per multiprocessor than `registers`
/// allows, when the count is within [`OCCUPANCY_STEP_SLACK`] of that step's
/// budget and the thread and shared-memory limits permit it. The caller compiles the promise
/// and keeps it only if nothing spills.
pub fn occupancy_step_to_try(
    target: &Target,
    threads: u32,
    registers: u32,
    shared_bytes: u32,
) -> Option<u32> {
    let now = groups_per_multiprocessor(target, threads, registers, shared_bytes);
    let next = now + 1;
    let budget = register_budget(target, threads, next);
    let fits = next * threads <= target.max_threads_per_multiprocessor
        && groups_by_shared_memory(target, shared_bytes) >= next;
    let close = f64::from(registers) <= f64::from(budget) * OCCUPANCY_STEP_SLACK;
    (fits && budget >= BASE_REGISTERS && registers > budget && close).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rung_parses_to_variants_alone() {
        assert_eq!(rung_variants().len(), VARIANT_LADDERS.len());
        for (rung, variants) in VARIANT_LADDERS.iter().zip(rung_variants()) {
            // Adding the variants to an empty request gives them back:
            // a rung names no layout, residency or promise.
            let mut request = LayoutRequest::default();
            crate::tuned::add_variants(&mut request, variants);
            assert_eq!(request, *variants, "{rung:?}");
            assert_eq!(variants.to_string(), rung.4, "written canonically");
            assert!(!rung.0.is_empty());
        }
    }

    #[test]
    fn a_rung_depending_on_the_row_count_skips_batch_invariant_requests() {
        let t = Target::h200();
        let few = Problem::operator(
            Operator::ResidualLayernorm,
            Default::default(),
            DType::F32,
            "4x4096".parse().unwrap(),
        );
        // One-pass moments and early columns.
        assert_eq!(variant_rungs(&few, &t, false).count(), 2);
        assert_eq!(variant_rungs(&few, &t, true).count(), 0);
        let many = Problem {
            shape: "4096x4096".parse().unwrap(),
            ..few
        };
        assert_eq!(variant_rungs(&many, &t, false).count(), 0);
    }
}
