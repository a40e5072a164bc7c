//! The automatic fields' defaults where nothing else chooses them (the
//! seed mapping, and U and G beside the model's W and V).

use crate::layout::Layout;
use crate::target::Target;
use lanefold_ir::DType;

/// Elements per worker the automatic mapping aims for.
const AUTO_ELEMENTS_PER_WORKER: usize = 8;
/// Threads per group the automatic mapping aims for when packing rows.
const AUTO_GROUP_THREADS: u32 = 256;

/// Aim for a few elements per worker; widen into a cluster while resident
/// tiles would not fit in registers.
pub(crate) fn auto_workers(
    n: usize,
    pack: u32,
    resident_tiles: usize,
    target: &Target,
    budget: &dyn Fn(u32) -> usize,
) -> u32 {
    let want = n.div_ceil(pack as usize * AUTO_ELEMENTS_PER_WORKER);
    let mut w = (want.next_power_of_two() as u32).clamp(1, target.max_threads_per_group);
    let layout = |w: u32| Layout {
        workers: w,
        pack,
        unroll: 1,
        rows_per_group: 1,
    };
    while resident_tiles > 0
        && w < target.max_workers()
        && resident_tiles * layout(w).slot_bound(n) > budget(layout(w).threads_per_group(target))
    {
        w *= 2;
    }
    w
}

/// Bytes of independent loads each worker should have in flight in a
/// streamed loop: on the H200 sum search (2026-11-29-sum-unroll-search-h200)
/// 8 bytes ran at 0.84x of the best, 16 at 0.94x, 32-64 at 0.98-1.0x.
const AUTO_BYTES_IN_FLIGHT: u32 = 64;
/// The same for a streamed plan that re-reads its tiles: the best plan of
/// rmsnorm f32 4096x32768 (2026-11-29-wide-rows-search-h200 and
/// norms-search-h200: W=1024 V=4, 270.6 µs) had all 8 of its 16-byte chunks
/// in flight per phase (its loops were then always fully unrolled).
const AUTO_BYTES_IN_FLIGHT_REREAD: u32 = 128;

/// Stripe unroll for the model mapping: enough chunks per loop step for
/// [`AUTO_BYTES_IN_FLIGHT`] (or, re-reading tiles,
/// [`AUTO_BYTES_IN_FLIGHT_REREAD`]), never more than the worker's full
/// chunks. U changes only how the loop is unrolled, never the arithmetic
/// order.
pub(crate) fn auto_unroll(n: usize, workers: u32, pack: u32, dtype: DType, rereads: bool) -> u32 {
    let access = pack * dtype.size_bytes() as u32;
    let full = (n / (workers as usize * pack as usize)).max(1) as u32;
    let bytes = if rereads {
        AUTO_BYTES_IN_FLIGHT_REREAD
    } else {
        AUTO_BYTES_IN_FLIGHT
    };
    (bytes / access).clamp(1, 8).min(full)
}

/// Pack short rows so groups have about 256 threads, but keep at least one
/// group per multiprocessor when there are enough rows for that.
pub(crate) fn auto_rows_per_group(workers: u32, rows: usize, target: &Target) -> u32 {
    if workers >= target.max_threads_per_group {
        return 1;
    }
    let mut g = (AUTO_GROUP_THREADS / workers).max(1);
    g = g.min((rows as u32).next_power_of_two());
    while g > 1 && rows.div_ceil(g as usize) < target.multiprocessors as usize {
        g /= 2;
    }
    g
}
