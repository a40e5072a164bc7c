//! What a cubin says of its own kernel: registers per thread and the local
//! frame, read from the ELF's `.nv.info` attributes. NVRTC's ptxas log says
//! the same, but on the H200 machine it was seen empty for a kernel another
//! process had compiled; the binary always carries the numbers.

use object::elf::FileHeader64;
use object::read::elf::ElfFile;
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SymbolIndex};

/// `EIATTR_REGCOUNT`: (symbol index, registers per thread).
const REGCOUNT: u8 = 0x2f;
/// `EIATTR_FRAME_SIZE`: (symbol index, local frame bytes, spills included).
const FRAME_SIZE: u8 = 0x11;
/// The attribute formats: no value, a byte, a half word (each 4 bytes in
/// all), and a sized value (`u16` length, then the bytes).
const FORMAT_SIZED: u8 = 4;

/// A kernel's resources as its cubin records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubinResources {
    pub registers: u32,
    /// Local memory per thread of the kernel itself (its stack frame, which
    /// holds its spills); a called function's frame is not counted.
    pub frame_bytes: u32,
}

/// `kernel`'s registers and frame from `cubin`; None where the binary is
/// not a 64-bit ELF or records no register count for it.
pub fn kernel_resources(cubin: &[u8], kernel: &str) -> Option<CubinResources> {
    let file = ElfFile::<FileHeader64<Endianness>>::parse(cubin).ok()?;
    let index = file
        .symbols()
        .find(|s| s.name() == Ok(kernel))
        .map(|s| s.index())?;
    let info = file.section_by_name(".nv.info")?.data().ok()?;
    let (mut registers, mut frame_bytes) = (None, 0);
    for (attribute, value) in sized_attributes(info) {
        let [s0, s1, s2, s3, v0, v1, v2, v3] = value[..] else {
            continue;
        };
        if SymbolIndex(u32::from_le_bytes([s0, s1, s2, s3]) as usize) != index {
            continue;
        }
        let v = u32::from_le_bytes([v0, v1, v2, v3]);
        match attribute {
            REGCOUNT => registers = Some(v),
            FRAME_SIZE => frame_bytes = v,
            _ => {}
        }
    }
    Some(CubinResources {
        registers: registers?,
        frame_bytes,
    })
}

/// The sized (attribute, value) records of an `.nv.info` section, up to
/// the end or the first record of an unknown format.
fn sized_attributes(mut info: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = vec![];
    while let [format, attribute, a, b, rest @ ..] = info {
        match *format {
            1..=3 => info = rest,
            FORMAT_SIZED => {
                let len = u16::from_le_bytes([*a, *b]) as usize;
                let Some((value, rest)) = rest.split_at_checked(len) else {
                    break;
                };
                out.push((*attribute, value));
                info = rest;
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of every format in a row: the walk steps over the unsized
    /// ones and reads the sized ones, and stops at a record cut short.
    #[test]
    fn the_attribute_walk_steps_over_unsized_records() {
        let mut info = vec![];
        info.extend([3, 0x1b, 0xff, 0x00]);
        info.extend([FORMAT_SIZED, REGCOUNT, 8, 0, 7, 0, 0, 0, 40, 0, 0, 0]);
        info.extend([2, 0x4c, 0, 0]);
        info.extend([FORMAT_SIZED, FRAME_SIZE, 8, 0, 7, 0, 0, 0, 16, 0, 0, 0]);
        info.extend([FORMAT_SIZED, FRAME_SIZE, 8, 0, 7, 0]);
        let records = sized_attributes(&info);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0], (REGCOUNT, &[7, 0, 0, 0, 40, 0, 0, 0][..]));
        assert_eq!(records[1].0, FRAME_SIZE);
    }

    #[test]
    fn a_binary_that_is_not_elf_has_no_resources() {
        assert_eq!(kernel_resources(b"not a cubin", "k"), None);
    }
}
