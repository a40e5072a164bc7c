//! The self-signalling form of a generated kernel, for lanefold's one-call
//! path: the same kernel, byte for byte, with three trailing parameters
//! and an epilogue in which the last group to finish writes a word to a
//! host-mapped flag. The host spins on that flag instead of waiting for a
//! second graph node (the flag writer) to be dispatched behind the kernel.
//!
//! Pure text in, text out: the default kernel (and its hash, which results
//! record) is untouched, and this form is derived from it alone, so an
//! audit can re-derive what a single call ran from the recorded source.

use crate::{CodegenError, Kernel};

/// Parameters the self-signalling form appends, in launch order: the
/// group counter (device memory, zero between calls), the host-mapped
/// flag, and the word written to it.
pub const SIGNAL_PARAMS: [&str; 3] = [
    "unsigned* __restrict__ lf_done_count",
    "unsigned* lf_done_flag",
    "unsigned lf_done_word",
];

/// Who in the kernel tells the host that every group is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Every group fences its writes and takes a ticket (a returning
    /// atomic); the last one resets the counter (stream order hands zero
    /// to the next call) and writes the flag. Each group waits for its
    /// fence and ticket before it retires.
    Ticket,
    /// Every group but the first posts a relaxed increment and retires at
    /// once; group 0, dispatched first, polls the counter after its own
    /// work until all the others have counted, then resets it and writes
    /// the flag. No fence orders the others' writes before the flag: the
    /// flag says every group has finished, and anything that reads the
    /// outputs is ordered behind the kernel on the call's stream.
    Watcher,
}

impl Signal {
    pub const ALL: [Signal; 2] = [Signal::Ticket, Signal::Watcher];

    pub fn name(self) -> &'static str {
        match self {
            Signal::Ticket => "ticket",
            Signal::Watcher => "watcher",
        }
    }

    fn epilogue(self) -> &'static str {
        match self {
            Signal::Ticket => TICKET_EPILOGUE,
            Signal::Watcher => WATCHER_EPILOGUE,
        }
    }
}

const TICKET_EPILOGUE: &str =
    "    // lanefold's call path: the last group to finish tells the host.
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        __threadfence(); // this group's writes before its ticket
        const unsigned lf_groups = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(lf_done_count, 1u) == lf_groups - 1) {
            __threadfence(); // every group's ticket (and writes) before the flag
            *lf_done_count = 0;
            __threadfence_system();
            *(volatile unsigned*)lf_done_flag = lf_done_word;
        }
    }
";

const WATCHER_EPILOGUE: &str = "    // lanefold's call path: group 0 tells the host once every other group
    // has counted itself done; the others retire without waiting.
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const unsigned lf_others = gridDim.x * gridDim.y * gridDim.z - 1;
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
            unsigned lf_seen = 0;
            while (lf_others != 0 && lf_seen != lf_others) {
                asm volatile(\"ld.relaxed.gpu.global.u32 %0, [%1];\" : \"=r\"(lf_seen) : \"l\"(lf_done_count) : \"memory\");
            }
            *lf_done_count = 0;
            __threadfence_system();
            *(volatile unsigned*)lf_done_flag = lf_done_word;
        } else {
            asm volatile(\"red.relaxed.gpu.global.add.u32 [%0], 1;\" :: \"l\"(lf_done_count) : \"memory\");
        }
    }
";

const ENTRY: &str = "extern \"C\" __global__ void";

/// `kernel` with [`SIGNAL_PARAMS`] appended to its signature and the
/// completion epilogue of `signal` before its closing brace. The kernel must be the
/// source's one entry point and its last definition (as `generate` emits
/// it); anything else is refused rather than guessed at.
pub fn self_signalling(kernel: &Kernel, signal: Signal) -> Result<Kernel, CodegenError> {
    let src = &kernel.source;
    let refuse = |why: &str| {
        CodegenError::Unsupported(format!(
            "kernel {}: no self-signalling form: {why}",
            kernel.name
        ))
    };
    let entry = match src.match_indices(ENTRY).map(|(i, _)| i).collect::<Vec<_>>()[..] {
        [one] => one,
        [] => return Err(refuse("no entry point")),
        _ => return Err(refuse("more than one entry point")),
    };
    let named = format!(" {}(", kernel.name);
    let open_paren = src[entry..]
        .find(&named)
        .map(|i| entry + i + named.len() - 1)
        .ok_or_else(|| refuse("the entry point is not named for the kernel"))?;
    // The signature ends at its matching parenthesis, the body opens next.
    let close_paren =
        matching(src, open_paren, b'(', b')').ok_or_else(|| refuse("unbalanced parameter list"))?;
    let body_open = close_paren
        + 1
        + src[close_paren + 1..]
            .find(|c: char| !c.is_whitespace())
            .filter(|&i| src[close_paren + 1 + i..].starts_with('{'))
            .ok_or_else(|| refuse("no body after the signature"))?;
    let body_close =
        matching(src, body_open, b'{', b'}').ok_or_else(|| refuse("unbalanced body"))?;
    if !src[body_close + 1..].trim().is_empty() {
        return Err(refuse("the kernel is not the source's last definition"));
    }
    if src[open_paren..close_paren].contains("lf_done_") {
        return Err(refuse("already self-signalling"));
    }
    let epilogue = signal.epilogue();
    let mut out = String::with_capacity(src.len() + epilogue.len() + 128);
    out.push_str(&src[..close_paren]);
    for p in SIGNAL_PARAMS {
        out.push_str(",\n    ");
        out.push_str(p);
    }
    out.push_str(&src[close_paren..body_close]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(epilogue);
    out.push_str(&src[body_close..]);
    Ok(Kernel {
        source: out,
        ..kernel.clone()
    })
}

/// Index of the bracket closing the one at `open` (nesting counted).
fn matching(src: &str, open: usize, left: u8, right: u8) -> Option<usize> {
    let bytes = src.as_bytes();
    if bytes.get(open) != Some(&left) {
        return None;
    }
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == left {
            depth += 1;
        } else if b == right {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}
