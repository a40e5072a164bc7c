//! Legality: a request, its automatic fields filled in, resolved into a
//! plan, or refused with the reason. Fail closed: every width, order,
//! register, shared-memory, cluster and occupancy limit is checked here,
//! and a variant that does not apply is dropped, never half-applied.

use crate::choice::defaults::{auto_rows_per_group, auto_unroll, auto_workers};
use crate::layout::{vector_access, Layout, VALID_PACKS};
use crate::mapper::{
    ColumnStage, LayoutRequest, MapperPolicy, OccupancyCap, Plan, Problem, ReductionOrder, Refusal,
    Residency, ResidencyRequest, RowPrefetch, SharedChunks,
};
use crate::target::Target;
use lanefold_ir::{Analysis, BufferKind, DType, Instr, Program, Value};

/// Registers a worker needs besides its private slots and load staging
/// (addresses, loop state, reduction scratch): an allowance.
pub(crate) const BASE_REGISTERS: u32 = 32;

/// Registers besides private slots: the base plus one 32-bit register per
/// word of a pack being loaded.
pub(crate) fn overhead_registers(pack: u32, dtype: DType) -> u32 {
    BASE_REGISTERS + (pack * dtype.size_bytes() as u32).div_ceil(4)
}

/// `target` with each cluster group `threads` wide (0: the target's own).
pub(crate) fn with_cluster_group_threads(target: &Target, threads: u32) -> Result<Target, Refusal> {
    match threads {
        0 => Ok(target.clone()),
        t if t.is_power_of_two() && t >= target.warp_size && t <= target.max_threads_per_group => {
            Ok(Target {
                cluster_group_threads: t,
                ..target.clone()
            })
        }
        t => Err(width(format!(
            "cluster group threads {t}: must be a power of two from {} to {}",
            target.warp_size, target.max_threads_per_group
        ))),
    }
}

/// The plan of `request` for `problem` on `target` (its cluster group size
/// already applied), or the refusal: the automatic fields take the
/// defaults of [`crate::choice::defaults`], the model's choice being made
/// before, in [`crate::choice`].
pub(crate) fn plan_rows(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<Plan, Refusal> {
    let split;
    let target = if request.split_groups && !target.clusters_within_group_limit {
        split = Target {
            clusters_within_group_limit: true,
            ..target.clone()
        };
        &split
    } else {
        target
    };
    let mut analysis = problem
        .program
        .verify()
        .map_err(|e| Refusal::Unverified(e.to_string()))?;
    let n = problem.shape.n;
    let rows = problem.shape.rows;

    if let (Some(order), false) = (request.order, analysis.has_reduction()) {
        return Err(Refusal::ElementOnly(format!(
            "'{}' has no reduction, so a reduction order ({order:?}) cannot apply",
            problem.program.name
        )));
    }
    let pack = if request.pack == 0 { 1 } else { request.pack };
    if !VALID_PACKS.contains(&pack) {
        return Err(width(format!("V={pack}: V must be one of 1, 2, 4, 8")));
    }
    if request.unroll > 8 {
        return Err(width(format!(
            "U={}: U must be from 1 to 8",
            request.unroll
        )));
    }
    let max_w = target.max_workers();
    if request.workers != 0 && (!request.workers.is_power_of_two() || request.workers > max_w) {
        return Err(width(format!(
            "W={}: W must be a power of two from 1 to {max_w} on {}",
            request.workers, target.name
        )));
    }

    // Sequential order is W = 1; any wider tree reorders the FP32 sums.
    let sums_reorderable =
        problem.program.reassociation && request.order != Some(ReductionOrder::Sequential);
    let order = if problem.program.has_sum() && !sums_reorderable {
        ReductionOrder::Sequential
    } else {
        request.order.unwrap_or(ReductionOrder::Tree)
    };
    if order == ReductionOrder::Sequential && request.workers > 1 {
        let why = if problem.program.reassociation {
            "an exact (sequential) order was requested"
        } else {
            "the program grants no reassociation"
        };
        return Err(Refusal::MissingPermission(format!(
            "W={} splits each FP32 sum over {} workers, but {why}; only W=1 keeps sequential order",
            request.workers, request.workers
        )));
    }

    let resident_tiles = analysis.resident.len();
    let budget = |threads: u32| -> usize {
        let per_thread = target
            .max_registers_per_thread
            .min(target.registers_per_group / threads.max(1));
        per_thread.saturating_sub(overhead_registers(pack, problem.dtype)) as usize
    };
    let workers = if request.workers != 0 {
        request.workers
    } else if order == ReductionOrder::Sequential {
        1
    } else {
        auto_workers(n, pack, resident_tiles, target, &budget)
    };
    // U is settled below, once the residency is known.
    let layout_for = |g: u32| Layout {
        workers,
        pack,
        unroll: 1,
        rows_per_group: g,
    };
    let rows_per_group = if request.rows_per_group != 0 {
        request.rows_per_group
    } else {
        auto_rows_per_group(workers, rows, target)
    };
    let mut layout = layout_for(rows_per_group);
    let groups_per_row = layout.groups_per_row(target);
    let threads = layout.threads_per_group(target);
    // A cluster of G rows: each group holds the same slice of G rows, so
    // a column's slice is read by one group for all of them.
    if groups_per_row > 1 && threads > target.max_threads_per_group {
        return Err(width(format!(
            "G={rows_per_group}: {rows_per_group} rows x {} threads of a cluster group exceed the group limit {}",
            layout.workers_per_group(target),
            target.max_threads_per_group
        )));
    }
    if groups_per_row == 1
        && (workers as u64 * rows_per_group as u64) > target.max_threads_per_group as u64
    {
        return Err(width(format!(
            "G x W = {rows_per_group} x {workers} threads exceeds the group limit {}",
            target.max_threads_per_group
        )));
    }

    if request.occupancy_cap > 0 && request.occupancy > request.occupancy_cap {
        return Err(width(format!(
            "occupancy {} promised above the cap of {} per multiprocessor",
            request.occupancy, request.occupancy_cap
        )));
    }
    if request.occupancy > 0
        && (request.occupancy > 32
            || request.occupancy as u64 * threads as u64
                > target.max_threads_per_multiprocessor as u64)
    {
        return Err(width(format!(
            "occupancy {}: groups of {threads} threads allow 1 to {} per multiprocessor",
            request.occupancy,
            (target.max_threads_per_multiprocessor / threads.max(1)).min(32)
        )));
    }

    // Misaligned rows read in aligned packs: a row of N sits in a shifted
    // layout of at most N + V - 1 elements, whose every chunk has slots.
    // A cluster's groups share the row's shift: worker w of the cluster
    // reads chunk c at `(c * W + w) * V - shift` wherever its group sits.
    // Columns (weight,
    // bias) cannot follow a row's shift: they are read element by element
    // and never held across rows (no hoisting).
    let aligned_packs = request.aligned_packs
        && !n.is_multiple_of(pack as usize)
        && vector_access(problem.dtype, pack as usize, pack as usize).is_some();
    let slot_bound = if aligned_packs {
        layout.chunks(n + pack as usize - 1) * pack as usize
    } else {
        layout.slot_bound(n)
    };
    // Rows of vector packs; staged columns move whole chunks only.
    let vector_packs = vector_access(problem.dtype, pack as usize, n).is_some();
    let whole_vector_packs = !layout.has_partial_pack(n) && vector_packs;
    // Packed 16-bit tiles asked for and possible: their slots hold loaded
    // words (a partial chunk's, read element by element, their bits).
    // Beside a partial chunk only in an explicit register request: the
    // automatic choice has measured packing on rows of whole chunks only.
    let packs = request.pack_resident
        && problem.dtype.size_bytes() == 2
        && (whole_vector_packs
            || (vector_packs && request.residency == ResidencyRequest::Registers));
    // An explicit register request with packed 16-bit tiles is budgeted
    // in packed words (two slots a register): the whole 32768-element row
    // of a 1024-thread group, as Inductor holds rows, fits only so. The
    // automatic mapping keeps the unpacked estimate (packing never changes
    // an automatic layout).
    let packs_explicitly = request.residency == ResidencyRequest::Registers && packs;
    // Registers for `slots` slots: two a register where packed explicitly.
    let in_words = |slots: usize| {
        if packs_explicitly {
            slots.div_ceil(2)
        } else {
            slots
        }
    };
    let budgeted = |tiles: usize| tiles * in_words(slot_bound);
    let mut rounded_resident = false;
    if request.rounded_resident && request.residency != ResidencyRequest::Stream {
        if let Some(kept) = analysis.keeping_rounded_tiles(&problem.program) {
            // An automatic residency keeps h only where it fits: a
            // streamed plan re-reads loads, never a computed tile.
            if request.residency == ResidencyRequest::Registers
                || budgeted(kept.resident.len()) <= budget(threads)
            {
                analysis = kept;
                rounded_resident = true;
            }
        }
    }
    // Computed tiles kept instead of their loads, the same way; not beside
    // packed 16-bit tiles.
    let mut computed_resident = false;
    if request.computed_resident && request.residency != ResidencyRequest::Stream && !packs {
        if let Some(kept) = analysis.keeping_computed_tiles(&problem.program) {
            if request.residency == ResidencyRequest::Registers
                || budgeted(kept.resident.len()) <= budget(threads)
            {
                analysis = kept;
                computed_resident = true;
            }
        }
    }
    let mut hoisted_columns = false;
    if request.hoist_columns && request.residency != ResidencyRequest::Stream && !aligned_packs {
        let hoisted = hoist_column_loads(&problem.program, &analysis);
        let extra = hoisted.resident.len() - analysis.resident.len();
        // Only when the hoisted columns fit beside the row tiles: hoisting
        // must never turn a register plan into a streamed one.
        if extra > 0 && hoisted.resident.len() * slot_bound <= budget(threads) {
            analysis = hoisted;
            hoisted_columns = true;
        }
    }
    let resident_tiles = analysis.resident.len();
    let needed_slots = resident_tiles * slot_bound;
    // Chunks of the row held in shared memory (`shared-chunks=N`) need no
    // registers, so they count before the fit: a 1024-thread group holds
    // an f32 row slice of 64 slots only so. Nothing else may claim that
    // shared memory (staged columns, prefetched rows, persistent loops).
    // The shared chunks are the row's last complete ones, copied a vector
    // pack at a time: a partial chunk after them stays in registers.
    let shared_chunk_count = (request.shared_chunks > 0
        && rows_per_group == 1
        && vector_packs
        && !request.stage_columns
        && !request.prefetch_rows
        && !request.persistent_clusters
        && analysis.resident_row_load(&problem.program).is_some())
    .then(|| request.shared_chunks.min(layout.complete_packs(n) as u32));
    let shared_slots = shared_chunk_count.map_or(0, |chunks| (chunks * pack) as usize);
    let budgeted_slots = budgeted(resident_tiles) - in_words(shared_slots);
    let fits = budgeted_slots <= budget(threads);
    let residency = match request.residency {
        ResidencyRequest::Stream => Residency::Stream,
        ResidencyRequest::Registers if resident_tiles > 0 && !fits => {
            return Err(Refusal::ResourceOverflow {
                resource: "private slots",
                needed: budgeted_slots as u64,
                limit: budget(threads) as u64,
                detail: format!(
                    "{resident_tiles} resident tile(s) x {slot_bound} slots per worker at {threads} threads per group"
                ),
            });
        }
        ResidencyRequest::Registers => Residency::Registers,
        ResidencyRequest::Auto if resident_tiles > 0 && !fits => Residency::Stream,
        ResidencyRequest::Auto => Residency::Registers,
    };
    layout.unroll = match (request.unroll, request.mapper) {
        (0, MapperPolicy::Seed) => 1,
        (0, MapperPolicy::Model) => {
            let rereads = residency == Residency::Stream && resident_tiles > 0;
            auto_unroll(n, workers, pack, problem.dtype, rereads)
        }
        (u, _) => u,
    };
    let resident_slots = if residency == Residency::Registers {
        needed_slots
    } else {
        0
    };
    let packed_resident = packs && resident_slots > 0;
    // The estimate stays that of the unpacked tile, so packing never
    // changes a layout: ptxas keeps the loaded words of some unpacked
    // plans by itself, and packing saved 0-16 of 64-80 registers on 64
    // slots (`lanefold compile-check`).
    let estimated_slots = if resident_slots == 0 {
        0
    } else if packs_explicitly && packed_resident {
        budgeted_slots
    } else {
        resident_slots - shared_slots
    };
    let registers = overhead_registers(pack, problem.dtype) + estimated_slots as u32;
    let register_file = registers as u64 * threads as u64;
    if registers > target.max_registers_per_thread
        || register_file > target.registers_per_group as u64
    {
        return Err(Refusal::ResourceOverflow {
            resource: "registers",
            needed: register_file,
            limit: target.registers_per_group as u64,
            detail: format!("{registers} per thread x {threads} threads"),
        });
    }
    let tree = layout.tree(target);
    let pushed = request.push_cluster_reduce && groups_per_row > 1;
    let persistent_clusters = request.persistent_clusters
        && pushed
        && rows_per_group == 1
        && residency == Residency::Registers;
    let shared_bytes = reduction_slot_bytes(
        analysis.reductions.len(),
        rows_per_group,
        tree.warps,
        groups_per_row,
        pushed,
        if persistent_clusters { 2 } else { 1 },
    );
    let columns = problem.program.column_inputs().count();
    // An occupancy promise bounds each group's shared memory too: stage
    // the leading columns that fit beside that many groups (layernorm f32
    // at three groups per SM: the weight, not the bias), none if none fits.
    let stage_limit = match request.occupancy {
        0 => target.shared_bytes_per_group,
        groups => (target.shared_bytes_per_multiprocessor / groups)
            .saturating_sub(crate::target::SHARED_RESERVED_PER_GROUP)
            .min(target.shared_bytes_per_group),
    } as u64;
    let stage = (1..=columns)
        .rev()
        .map(|staged| {
            ColumnStage::new(
                shared_bytes,
                staged,
                n / groups_per_row as usize,
                problem.dtype,
            )
        })
        .find(|stage| stage.total_bytes() <= stage_limit);
    let column_stage = stage.filter(|_| {
        request.stage_columns
            && groups_per_row > 1
            && rows_per_group == 1
            && residency == Residency::Registers
            && whole_vector_packs
    });
    let shared_bytes = column_stage.map_or(shared_bytes, |stage| stage.total_bytes() as u32);
    // A persistent cluster prefetches too: each group its own share of the
    // row, one copy per chunk of W x V elements (so whole chunks only).
    let row_prefetch = if request.prefetch_rows
        && residency == Residency::Registers
        && (groups_per_row == 1 || (persistent_clusters && n.is_multiple_of(layout.chunk_span())))
        && rows_per_group == 1
        && column_stage.is_none()
        && whole_vector_packs
        && problem.program.row_inputs().count() == 1
    {
        let row_bytes = (n / groups_per_row as usize) as u64 * problem.dtype.size_bytes() as u64;
        let prefetch = RowPrefetch {
            launched_groups: 0,
            buffer_offset: shared_bytes.next_multiple_of(16),
            row_bytes: row_bytes as u32,
        };
        // One copy completes one `mbarrier` phase: at most 2^20 - 1 bytes.
        (row_bytes.is_multiple_of(16)
            && row_bytes < 1 << 20
            && prefetch.total_bytes() <= target.shared_bytes_per_group)
            .then(|| {
                let per_multiprocessor =
                    groups_per_multiprocessor(target, threads, registers, prefetch.total_bytes());
                // Whole clusters; the runtime asks the driver for the count.
                let clusters = target.multiprocessors as u64 / groups_per_row as u64
                    * per_multiprocessor as u64;
                let launched = clusters.clamp(1, rows as u64) * groups_per_row as u64;
                RowPrefetch {
                    launched_groups: launched as u32,
                    ..prefetch
                }
            })
    } else {
        None
    };
    let shared_bytes = row_prefetch.map_or(shared_bytes, |prefetch| prefetch.total_bytes());
    let shared_chunks = shared_chunk_count
        .filter(|_| residency == Residency::Registers)
        .map(|chunks| SharedChunks {
            chunks,
            offset_bytes: shared_bytes.next_multiple_of(16),
            // One row per group: each thread holds `pack` elements a chunk.
            bytes: chunks * threads * pack * problem.dtype.size_bytes() as u32,
        });
    let shared_bytes = shared_chunks.map_or(shared_bytes, |shared| shared.total_bytes());
    let by_threads = target.max_threads_per_multiprocessor / threads.max(1);
    let (shared_bytes, occupancy_cap) = match request.occupancy_cap {
        0 => (shared_bytes, None),
        cap if cap >= by_threads => (shared_bytes, None),
        cap => {
            let (padded, carveout_percent) = crate::target::occupancy_cap_shared(shared_bytes, cap)
                .ok_or_else(|| {
                    width(format!(
                        "occupancy cap {cap}: {cap} groups of {shared_bytes} bytes of shared memory fit no carve-out"
                    ))
                })?;
            let cap = OccupancyCap {
                groups: cap,
                carveout_percent,
            };
            (padded, Some(cap))
        }
    };
    if shared_bytes > target.shared_bytes_per_group {
        return Err(Refusal::ResourceOverflow {
            resource: "shared memory",
            needed: shared_bytes as u64,
            limit: target.shared_bytes_per_group as u64,
            detail: format!("{} reductions", analysis.reductions.len()),
        });
    }
    if request.in_place {
        in_place(&problem.program, &analysis, pushed)?;
    }
    let groups = rows.div_ceil(rows_per_group as usize) as u64 * groups_per_row as u64;
    Ok(Plan {
        in_place: request.in_place,
        aligned_packs,
        packed_register_estimate: packs_explicitly && packed_resident,
        problem: problem.clone(),
        analysis,
        layout,
        residency,
        order,
        tree,
        threads_per_group: threads,
        groups_per_row,
        groups,
        slot_bound,
        resident_slots,
        registers,
        shared_bytes,
        target: target.name.clone(),
        batch_invariant: false,
        streaming_hints: request.streaming_hints,
        hoisted_columns,
        min_groups_per_multiprocessor: (request.occupancy > 0).then_some(request.occupancy),
        reread_hints: request.reread_hints && residency == Residency::Stream && resident_tiles > 0,
        // Aligned packs read columns element by element, with no policy.
        keep_columns: request.keep_columns && columns > 0 && !aligned_packs,
        l1_columns: request.l1_columns && columns > 0 && !aligned_packs,
        folded_pack_addresses: folds_by_default(residency, occupancy_cap)
            && !request.unfold_pack_addresses
            && (n > layout.chunk_span() || whole_vector_packs),
        ordered_columns: request.ordered_columns
            && columns > 0
            && vector_access(problem.dtype, pack as usize, n).is_some(),
        ordered_hinted_loads: request.ordered_hinted_loads,
        occupancy_cap,
        batched_loads: request.batch_loads
            && residency == Residency::Stream
            && whole_vector_packs
            && layout.complete_packs(n) <= 8
            && column_stage.is_none(),
        unguarded_stores: request.unguarded_stores
            && layout.rows_per_group == 1
            && groups_per_row == 1
            && row_prefetch.is_none(),
        // One-pass moments derive no tile from the row before the output
        // phase: nothing to recompute, and the kernel would differ only
        // by its name.
        recompute_derived: request.recompute_derived
            && residency == Residency::Registers
            && !problem.one_pass_moments(),
        early_columns: if residency == Residency::Registers
            && columns > 0
            && vector_access(problem.dtype, pack as usize, n).is_some()
            && !request.ordered_columns
            && !hoisted_columns
            && column_stage.is_none()
            && row_prefetch.is_none()
        {
            request.early_columns.min(layout.chunks(n) as u32)
        } else {
            0
        },
        shared_chunks,
        column_stage,
        packed_resident,
        rounded_resident,
        computed_resident,
        relaxed_cluster_exit: request.relaxed_cluster_exit && groups_per_row > 1,
        pushed_cluster_reduce: pushed,
        persistent_clusters,
        l2_prefetch_rows: if residency == Residency::Registers
            && layout.rows_per_group == 1
            && row_prefetch.is_none()
            && n >= layout.chunk_span()
            && l2_prefetch_aligned(problem.dtype, &layout, groups_per_row, n)
        {
            request.l2_prefetch_rows
        } else {
            0
        },
        row_prefetch,
    })
}

/// May the program's row output be written over its first row input
/// ([`LayoutRequest::in_place`])? Safe when no element is read after its
/// output is written:
///
/// - a row input is read element-wise by the one thread that owns the
///   element (the layout map is the same in every phase, register-resident
///   or re-read, in a group or across a cluster, persistent or not), and
///   its last read of the element precedes its store of it in program
///   order (the store's value depends on it); so the output's phase must
///   be the last phase that reads the input;
/// - reads of elements other threads own (a gathered `x[target]`, the
///   row's first element, a cold path's re-read) must come in an earlier
///   phase than the store, so that the reduction tree between (a block
///   barrier, a cluster barrier with release and acquire, or, for a row of
///   one warp's lanes, the `__syncwarp` the kernel then adds) orders them
///   before any store. A pushed cluster reduction does not: its
///   `st.async` completes a transaction relaxed, so it is refused;
/// - a cold path re-reads the row after the stores: refused;
/// - a row prefetched into shared memory is the next row, which no other
///   group writes, and an L2 prefetch reads nothing into registers.
fn in_place(program: &Program, analysis: &Analysis, pushed: bool) -> Result<(), Refusal> {
    let refuse = |why: String| Err(Refusal::InPlace(format!("{}: {why}", program.name)));
    let Some(input) = program.row_inputs().next() else {
        return refuse("no row input to write over".into());
    };
    let outputs: Vec<_> = program
        .outputs
        .iter()
        .filter(|d| d.kind == BufferKind::Row)
        .collect();
    let [output] = outputs[..] else {
        return refuse(format!(
            "{} row outputs; in place writes exactly one",
            outputs.len()
        ));
    };
    let store_phase = program
        .body
        .iter()
        .find_map(|i| match i {
            Instr::Store { buffer, value } if *buffer == output.name => {
                Some(analysis.phase[value.index()])
            }
            _ => None,
        })
        .expect("a verified program stores each output");
    if pushed {
        return refuse(
            "a pushed cluster reduction (push-reduce) orders no group's reads before another \
             group's stores"
                .into(),
        );
    }
    let is_input = |v: &Value| matches!(&program.body[v.index()], Instr::Load { buffer } if *buffer == input.name);
    for (at, instr) in program.body.iter().enumerate() {
        match instr {
            Instr::Rescaled { .. } => {
                return refuse("a cold path re-reads the row after its stores".into());
            }
            Instr::Load { buffer } if *buffer == input.name => {
                if let Some(&last) = analysis.demanded[at].last() {
                    if last > store_phase {
                        return refuse(format!(
                            "'{}' is read in phase {last}, after '{}' is stored in phase {store_phase}",
                            input.name, output.name
                        ));
                    }
                }
            }
            Instr::RowFirst { buffer }
                if *buffer == input.name && analysis.phase[at] >= store_phase =>
            {
                return refuse(format!(
                    "the first element of '{}' is read in the phase that stores '{}'",
                    input.name, output.name
                ));
            }
            Instr::MaskIndex { tile, .. }
                if is_input(tile) && analysis.phase[at] >= store_phase =>
            {
                return refuse(format!(
                    "an element of '{}' chosen by index is read in the phase that stores '{}'",
                    input.name, output.name
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Can a group's share of a chunk ([`Layout::group_chunk_span`]) be
/// prefetched by one bulk instruction: its bytes and every row's start
/// multiples of 16?
fn l2_prefetch_aligned(dtype: DType, layout: &Layout, groups_per_row: u32, n: usize) -> bool {
    let share = layout.group_chunk_span(groups_per_row);
    let bytes = dtype.size_bytes();
    (share * bytes).is_multiple_of(16) && (n * bytes).is_multiple_of(16)
}

/// Shared memory for the reduction tree: one f32 per warp per reduction,
/// per row of the group; clusters add one slot per group of the cluster,
/// per row.
fn reduction_slot_bytes(
    reductions: usize,
    rows_per_group: u32,
    warps: u32,
    groups_per_row: u32,
    pushed: bool,
    pushed_sets: u32,
) -> u32 {
    let cluster = if groups_per_row > 1 {
        groups_per_row * pushed_sets
    } else {
        0
    };
    // A pushed reduction adds one 8-byte `mbarrier` per reduction and set
    // of slots, from an 8-byte boundary.
    let barriers = if pushed {
        8 * reductions as u32 * pushed_sets + 4
    } else {
        0
    };
    4 * reductions as u32 * rows_per_group * (warps + cluster) + barriers
}

/// Plans whose pack addresses fold unless a row rule or the request says
/// otherwise ([`Plan::folded_pack_addresses`]): register plans, and
/// streamed plans under an occupancy cap.
pub(crate) fn folds_by_default(residency: Residency, occupancy_cap: Option<OccupancyCap>) -> bool {
    residency == Residency::Registers || occupancy_cap.is_some()
}

/// Groups of `threads` threads at `registers` per thread, each with
/// `shared_bytes` of shared memory, that fit on one multiprocessor at once
/// (at least 1): the occupancy the cost model assumes for a plan.
pub fn groups_per_multiprocessor(
    target: &Target,
    threads: u32,
    registers: u32,
    shared_bytes: u32,
) -> u32 {
    let by_threads = target.max_threads_per_multiprocessor / threads.max(1);
    // sm_90 allocates registers per warp in steps of 256, 8 per thread.
    let allocated = registers.max(1).div_ceil(8) * 8;
    let by_registers = target.registers_per_group / (allocated * threads.max(1));
    by_threads
        .min(by_registers)
        .min(groups_by_shared_memory(target, shared_bytes))
        .clamp(1, 32)
}

/// Groups whose `shared_bytes` (and the hardware's reserve) fit in one
/// multiprocessor's shared memory.
pub(crate) fn groups_by_shared_memory(target: &Target, shared_bytes: u32) -> u32 {
    target.shared_bytes_per_multiprocessor
        / (shared_bytes + crate::target::SHARED_RESERVED_PER_GROUP)
}

/// Registers per thread a group may use for `groups` of `threads` threads
/// to share one multiprocessor (whole multiples of 8, as sm_90 allocates).
pub fn register_budget(target: &Target, threads: u32, groups: u32) -> u32 {
    (target.registers_per_group / (threads.max(1) * groups.max(1))) / 8 * 8
}

/// The analysis with every column load (weight, bias) that is first needed
/// after the first tile phase also demanded in that phase and resident, so
/// the emitter loads it there and keeps it in private slots.
fn hoist_column_loads(program: &Program, analysis: &Analysis) -> Analysis {
    use lanefold_ir::{BufferKind, Instr, Kind, Value};
    let kind_of = |buffer: &str| program.input(buffer).map(|d| d.kind);
    let loads = || {
        program
            .body
            .iter()
            .enumerate()
            .filter_map(|(at, i)| match i {
                Instr::Load { buffer } if analysis.kinds[at] == Kind::Tile => {
                    Some((at, kind_of(buffer)))
                }
                _ => None,
            })
    };
    let first_row_phase = loads()
        .filter(|(_, k)| *k == Some(BufferKind::Row))
        .filter_map(|(at, _)| analysis.demanded[at].first().copied())
        .min();
    let mut out = analysis.clone();
    let Some(first) = first_row_phase else {
        return out;
    };
    for (at, kind) in loads() {
        if kind == Some(BufferKind::Column)
            && analysis.demanded[at].first().is_some_and(|&p| p > first)
        {
            out.demanded[at].insert(first);
            let v = Value(at as u32);
            if !out.resident.contains(&v) {
                out.resident.push(v);
            }
        }
    }
    out.resident.sort_by_key(|v| v.index());
    out
}

fn width(msg: String) -> Refusal {
    Refusal::InvalidWidth(msg)
}

#[cfg(test)]
mod tests;
