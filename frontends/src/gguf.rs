//! GGUF reader over mmap: versions 2 and 3, every metadata value type, the
//! alignment key. Every count, size and offset read from the file is checked
//! against the bytes that are really there before it is used, so a hostile
//! header fails fast with an error naming the field, never a huge allocation.

use crate::bytes::{CheckpointBytes, FileBytes};
use crate::error::{commas, Diagnostic};
use graphc_ir::DType;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v as u64),
            MetaValue::U16(v) => Some(v as u64),
            MetaValue::U32(v) => Some(v as u64),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::Str(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Row-major shape (GGUF's `ne` reversed: `[rows, cols]` for a matrix).
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Absolute offset of the first byte in the file.
    pub offset: u64,
    pub bytes: u64,
}

pub struct GgufFile {
    /// The file (a split model's first).
    pub path: String,
    pub version: u32,
    pub alignment: u64,
    /// Where the (first) file's tensor infos end, and where its data
    /// section starts (the next multiple of `alignment`): its tensor
    /// offsets count from there.
    pub infos_end: u64,
    pub data_start: u64,
    pub metadata: BTreeMap<String, MetaValue>,
    /// The tensors graphc computes, in file order (a split model's files
    /// one after another).
    pub tensors: Vec<TensorInfo>,
    /// The others (only from `open_any_type` / `from_bytes_any_type`; `open`
    /// refuses a file that has any), in file order.
    pub uncomputable: Vec<UncomputableTensor>,
    /// The file's bytes, or a split model's files one after another.
    pub data: CheckpointBytes,
    /// Tensors presented as a slice of a file tensor (an expert of a
    /// stacked `ffn_*_exps`, `split_stacked_experts`): name → the file's name.
    pub slice_of: BTreeMap<String, String>,
}

/// A tensor of a block type the GGUF format defines but graphc does not
/// compute (tq1_0, tq2_0, i8, f64, ...): sized and bounds-checked as the
/// others are, so `graphc inspect` can list it; `GgufFile::open` refuses a
/// file that has one, naming it.
#[derive(Clone, Debug, PartialEq)]
pub struct UncomputableTensor {
    pub name: String,
    /// Row-major shape, as `TensorInfo::shape`.
    pub shape: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Absolute offset of the first byte in the file.
    pub offset: u64,
    pub bytes: u64,
}

/// A GGML tensor type id (ggml.h `enum ggml_type`) that the format defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType(u32);

/// Every type ggml defines: id, name, elements and bytes per block, and
/// the `DType` graphc computes it as. Ids 4, 5 (q4_2, q4_3: gone before
/// GGUF existed), 31–33 and 36–38 (the interleaved q4_0_4_4 … iq4_nl_8_8,
/// removed from ggml, which no longer reads them) are not types. Q8_1 is
/// ggml's 36-byte block (two f16 and 32 quants; the `gguf` Python package's
/// table says 40, from when its scales were f32).
const GGML_TYPES: &[(u32, &str, u64, u64, Option<DType>)] = &[
    (0, "f32", 1, 4, Some(DType::F32)),
    (1, "f16", 1, 2, Some(DType::F16)),
    (2, "q4_0", 32, 18, Some(DType::Q4_0)),
    (3, "q4_1", 32, 20, Some(DType::Q4_1)),
    (6, "q5_0", 32, 22, Some(DType::Q5_0)),
    (7, "q5_1", 32, 24, Some(DType::Q5_1)),
    (8, "q8_0", 32, 34, Some(DType::Q8_0)),
    (9, "q8_1", 32, 36, None),
    (10, "q2_k", 256, 84, Some(DType::Q2K)),
    (11, "q3_k", 256, 110, Some(DType::Q3K)),
    (12, "q4_k", 256, 144, Some(DType::Q4K)),
    (13, "q5_k", 256, 176, Some(DType::Q5K)),
    (14, "q6_k", 256, 210, Some(DType::Q6K)),
    (15, "q8_k", 256, 292, None),
    (16, "iq2_xxs", 256, 66, Some(DType::IQ2XXS)),
    (17, "iq2_xs", 256, 74, Some(DType::IQ2XS)),
    (18, "iq3_xxs", 256, 98, Some(DType::IQ3XXS)),
    (19, "iq1_s", 256, 50, Some(DType::IQ1S)),
    (20, "iq4_nl", 32, 18, Some(DType::IQ4NL)),
    (21, "iq3_s", 256, 110, Some(DType::IQ3S)),
    (22, "iq2_s", 256, 82, Some(DType::IQ2S)),
    (23, "iq4_xs", 256, 136, Some(DType::IQ4XS)),
    (24, "i8", 1, 1, None),
    (25, "i16", 1, 2, None),
    (26, "i32", 1, 4, Some(DType::I32)),
    (27, "i64", 1, 8, None),
    (28, "f64", 1, 8, None),
    (29, "iq1_m", 256, 56, Some(DType::IQ1M)),
    (30, "bf16", 1, 2, Some(DType::BF16)),
    (34, "tq1_0", 256, 54, None),
    (35, "tq2_0", 256, 66, None),
    (39, "mxfp4", 32, 17, Some(DType::MXFP4)),
    (40, "nvfp4", 64, 36, None),
    (41, "q1_0", 128, 18, None),
];

impl GgmlType {
    /// The type with this id, if ggml defines one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().any(|t| t.0 == id).then_some(GgmlType(id))
    }

    fn entry(self) -> &'static (u32, &'static str, u64, u64, Option<DType>) {
        GGML_TYPES.iter().find(|t| t.0 == self.0).expect("a GgmlType is made only from a defined id")
    }

    pub fn id(self) -> u32 {
        self.0
    }

    /// ggml's name, lower case (`iq2_xxs`); graphc's `DType` name where it has one.
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> u64 {
        self.entry().2
    }

    /// Bytes per block (the element size for plain types).
    pub fn block_bytes(self) -> u64 {
        self.entry().3
    }

    /// The type graphc computes this one as, `None` where it has no kernels.
    pub fn dtype(self) -> Option<DType> {
        self.entry().4
    }

    /// Every type ggml defines.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        GGML_TYPES.iter().map(|t| GgmlType(t.0))
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn removed_ggml_type(id: u32) -> Option<&'static str> {
    Some(match id {
        4 => "q4_2",
        5 => "q4_3",
        31 => "q4_0_4_4",
        32 => "q4_0_4_8",
        33 => "q4_0_8_8",
        36 => "iq4_nl_4_4",
        37 => "iq4_nl_4_8",
        38 => "iq4_nl_8_8",
        _ => return None,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &str) -> Diagnostic {
        Diagnostic::new(self.path, format!("truncated GGUF: the file ends inside {what}"))
            .note(format!("needed bytes at offset {} but the file has {}", commas(self.pos as u64), commas(self.b.len() as u64)))
            .help("the file may be truncated; re-download it")
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Diagnostic> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| self.err(what))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, Diagnostic> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, Diagnostic> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &str) -> Result<u32, Diagnostic> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Diagnostic> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }
    /// A count that says each item needs at least `min_item_bytes`: refused
    /// when the rest of the file cannot hold that many.
    fn count(&mut self, what: &str, min_item_bytes: u64) -> Result<usize, Diagnostic> {
        let n = self.u64(what)?;
        if n.saturating_mul(min_item_bytes) > self.remaining() {
            return Err(Diagnostic::new(
                self.path,
                format!("truncated or corrupt GGUF: the header claims {} {what}, more than the file can hold", commas(n)),
            )
            .note(format!("each needs at least {min_item_bytes} bytes and {} bytes remain", commas(self.remaining())))
            .help("the file is corrupt, truncated or not a GGUF file"));
        }
        Ok(n as usize)
    }
    fn string(&mut self, what: &str) -> Result<String, Diagnostic> {
        let n = self.count(&format!("bytes of {what}"), 1)?;
        let s = self.take(n, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| Diagnostic::new(self.path, format!("{what} is not valid UTF-8")))
    }
    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<MetaValue, Diagnostic> {
        let what = format!("the value of `{key}`");
        Ok(match ty {
            0 => MetaValue::U8(self.u8(&what)?),
            1 => MetaValue::I8(self.u8(&what)? as i8),
            2 => MetaValue::U16(self.u16(&what)?),
            3 => MetaValue::I16(self.u16(&what)? as i16),
            4 => MetaValue::U32(self.u32(&what)?),
            5 => MetaValue::I32(self.u32(&what)? as i32),
            6 => MetaValue::F32(f32::from_bits(self.u32(&what)?)),
            7 => MetaValue::Bool(self.u8(&what)? != 0),
            8 => MetaValue::Str(self.string(&what)?),
            9 => {
                if depth > 4 {
                    return Err(Diagnostic::new(self.path, format!("metadata `{key}` nests arrays too deeply")));
                }
                let ety = self.u32(&what)?;
                let min = match ety {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let n = self.count(&format!("elements of `{key}`"), min)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(ety, key, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64(&what)?),
            11 => MetaValue::I64(self.u64(&what)? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64(&what)?)),
            t => {
                return Err(Diagnostic::new(self.path, format!("metadata `{key}` has unknown value type {t}"))
                    .help("the file is corrupt or from a newer GGUF version"))
            }
        })
    }
}

impl GgufFile {
    /// Read a GGUF to compute with: a tensor of a type graphc has no
    /// kernels for is refused, naming it and its type.
    pub fn open(path: &Path) -> Result<GgufFile, Diagnostic> {
        Self::open_any_type(path)?.refuse_uncomputable()
    }

    /// Read a GGUF whatever its tensors' types (any type the format
    /// defines): those graphc does not compute go to `uncomputable`. For
    /// listing a file (`graphc inspect`), not for computing with it.
    ///
    /// A split model (`split.count` > 1: llama.cpp's `gguf-split`, or
    /// `convert_hf_to_gguf.py --split-max-*`) is opened at its first file,
    /// `PREFIX-00001-of-0000N.gguf`; the others, `PREFIX-0000K-of-0000N.gguf`
    /// beside it, are read with it, each its `split.no` in order, together
    /// holding `split.tensors.count` tensors, no name twice.
    pub fn open_any_type(path: &Path) -> Result<GgufFile, Diagnostic> {
        let p = path.display().to_string();
        let mut g = Self::parse(p.clone(), map_file(path)?)?;
        let Some((no, count)) = g.split_position()? else { return Ok(g) };
        if no != 0 {
            let first = split_path(path, count, 1).map_or("its first file".to_string(), |f| f.display().to_string());
            return Err(Diagnostic::new(&p, format!("split {} of {count} of a model: open its first file, {first}", no + 1))
                .note("the first file holds the metadata; the others are read with it"));
        }
        let mut names: std::collections::HashSet<String> =
            g.tensors.iter().map(|t| t.name.clone()).chain(g.uncomputable.iter().map(|t| t.name.clone())).collect();
        for k in 2..=count {
            let Some(part) = split_path(path, count, k) else {
                return Err(Diagnostic::new(&p, format!("`split.count` is {count}, but the file is not named `PREFIX-00001-of-{count:05}.gguf`"))
                    .note("graphc finds a split model's other files by llama.cpp's names"));
            };
            let shown = part.display().to_string();
            let next = Self::parse_at(shown.clone(), map_file(&part)?, g.data.len())?;
            if next.split_position()? != Some((k - 1, count)) {
                return Err(Diagnostic::new(&shown, format!("is not split {k} of {count}: its `split.no` / `split.count` say otherwise"))
                    .note(format!("the first file: {p}")));
            }
            let GgufFile { tensors, uncomputable, data, .. } = next;
            for name in tensors.iter().map(|t| &t.name).chain(uncomputable.iter().map(|t| &t.name)) {
                if !names.insert(name.clone()) {
                    return Err(Diagnostic::new(&shown, format!("tensor `{name}` is in an earlier file of the split model too")));
                }
            }
            g.tensors.extend(tensors);
            g.uncomputable.extend(uncomputable);
            for file in data.into_files() {
                g.data.push(file);
            }
        }
        let held = g.tensors.len() + g.uncomputable.len();
        let expected = g.get("split.tensors.count").and_then(|v| v.as_u64());
        if expected != Some(held as u64) {
            return Err(Diagnostic::new(&p, format!("`split.tensors.count` is {expected:?}, but the {count} files hold {held} tensors")));
        }
        Ok(g)
    }

    /// `(split.no, split.count)` of a file of a split model; `None` for a
    /// file that is a whole model.
    fn split_position(&self) -> Result<Option<(usize, usize)>, Diagnostic> {
        let count = self.uint_or("split.count", 1)?;
        if count <= 1 {
            return Ok(None);
        }
        let no = self.uint("split.no")?;
        if no >= count || count > 99_999 {
            return Err(Diagnostic::new(&self.path, format!("`split.no` {no} of `split.count` {count} is no split file's")));
        }
        Ok(Some((no as usize, count as usize)))
    }

    /// Read a GGUF held in memory, as `open`; `path` names it in diagnostics.
    pub fn from_bytes(path: &str, bytes: Vec<u8>) -> Result<GgufFile, Diagnostic> {
        Self::from_bytes_any_type(path, bytes)?.refuse_uncomputable()
    }

    /// Read a GGUF held in memory, as `open_any_type`.
    pub fn from_bytes_any_type(path: &str, bytes: Vec<u8>) -> Result<GgufFile, Diagnostic> {
        Self::parse(path.to_string(), FileBytes::Owned(bytes))
    }

    /// The file itself where every tensor is of a type graphc computes;
    /// else an error naming the first other tensor and its type (and how
    /// many more there are, of which types).
    pub fn refuse_uncomputable(self) -> Result<GgufFile, Diagnostic> {
        let Some(first) = self.uncomputable.first() else { return Ok(self) };
        let mut types: Vec<&str> = self.uncomputable.iter().map(|t| t.ggml_type.name()).collect();
        types.sort_unstable();
        types.dedup();
        let computed: Vec<&str> = GgmlType::all().filter_map(|t| t.dtype()).map(|d| d.name()).collect();
        let mut d = Diagnostic::new(
            &self.path,
            format!("tensor `{}` is {} (GGML type {}), which graphc cannot compute", first.name, first.ggml_type, first.ggml_type.id()),
        );
        if self.uncomputable.len() > 1 {
            d = d.note(format!("{} tensors of this file are of such types: {}", self.uncomputable.len(), types.join(", ")));
        }
        Err(d
            .note(format!("graphc computes: {}", computed.join(", ")))
            .help("`graphc inspect` lists every tensor's type; use a quantization of the model in one of the types graphc computes"))
    }

    fn parse(path: String, bytes: FileBytes) -> Result<GgufFile, Diagnostic> {
        Self::parse_at(path, bytes, 0)
    }

    /// One file whose first byte has offset `base` (a split model's later
    /// files follow the earlier ones).
    fn parse_at(path: String, mmap: FileBytes, base: u64) -> Result<GgufFile, Diagnostic> {
        let (version, alignment, metadata, infos, infos_end, data_start) = {
            let mut r = Reader { b: &mmap, pos: 0, path: &path };
            let magic = r.take(4, "the magic number")?;
            if magic != b"GGUF" {
                return Err(
                    Diagnostic::new(&path, "not a GGUF file: wrong magic number").note(format!("expected the bytes `GGUF`, found {magic:02x?}"))
                );
            }
            let version = r.u32("the version")?;
            if version != 2 && version != 3 {
                return Err(Diagnostic::new(&path, format!("unsupported GGUF version {version}")).note("graphc reads GGUF versions 2 and 3"));
            }
            // A tensor info is at least 8 (name len) + 4 + 8 + 4 + 8 bytes; a kv at least 8 + 4 + 1.
            let n_tensors = r.count("tensors", 32)?;
            let n_kv = r.count("metadata entries", 13)?;
            let mut metadata = BTreeMap::new();
            for _ in 0..n_kv {
                let key = r.string("a metadata key")?;
                let ty = r.u32(&format!("the type of `{key}`"))?;
                let v = r.value(ty, &key, 0)?;
                metadata.insert(key, v);
            }
            let alignment = match metadata.get("general.alignment") {
                None => 32,
                Some(v) => match v.as_u64() {
                    Some(a) if a > 0 && a.is_power_of_two() => a,
                    _ => return Err(Diagnostic::new(&path, format!("`general.alignment` is {v:?}, not a power of two"))),
                },
            };
            let mut infos = Vec::with_capacity(n_tensors);
            for _ in 0..n_tensors {
                let name = r.string("a tensor name")?;
                let n_dims = r.u32(&format!("the rank of `{name}`"))?;
                if n_dims > 4 {
                    return Err(Diagnostic::new(&path, format!("tensor `{name}` has rank {n_dims}; GGUF allows at most 4")));
                }
                let mut ne = Vec::new();
                for _ in 0..n_dims {
                    ne.push(r.u64(&format!("the shape of `{name}`"))?);
                }
                let ty = r.u32(&format!("the type of `{name}`"))?;
                let offset = r.u64(&format!("the offset of `{name}`"))?;
                infos.push((name, ne, ty, offset));
            }
            let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
            (version, alignment, metadata, infos, r.pos as u64, data_start)
        };
        let file_len = mmap.len() as u64;
        let mut tensors = Vec::with_capacity(infos.len());
        let mut uncomputable = Vec::new();
        for (name, ne, ty, rel) in infos {
            let ggml_type = GgmlType::from_id(ty).ok_or_else(|| match removed_ggml_type(ty) {
                Some(old) => Diagnostic::new(&path, format!("tensor `{name}` has GGML type {ty} ({old}), which ggml has removed"))
                    .help("convert the model again with a current llama.cpp"),
                None => Diagnostic::new(&path, format!("tensor `{name}` has unknown GGML type {ty}"))
                    .note(format!("GGUF defines types {}", GgmlType::all().map(|t| t.id().to_string()).collect::<Vec<_>>().join(", ")))
                    .help("the file is corrupt or from a newer GGUF version"),
            })?;
            let (be, bb) = (ggml_type.block_elems(), ggml_type.block_bytes());
            // Quantized rows are whole blocks (ne[0] is the row length).
            let row = ne.first().copied().unwrap_or(1);
            if be > 1 && row % be != 0 {
                return Err(Diagnostic::new(
                    &path,
                    format!("tensor `{name}` is {ggml_type} with rows of {row} elements, not a whole number of {be}-element blocks"),
                ));
            }
            let n_elems = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let bytes = n_elems
                .filter(|n| n % be == 0)
                .and_then(|n| (n / be).checked_mul(bb))
                .ok_or_else(|| Diagnostic::new(&path, format!("tensor `{name}` has shape {ne:?}, not a whole number of {ggml_type} blocks")))?;
            // The format puts every tensor's data at a multiple of the
            // alignment; an offset off it reads shifted bytes.
            if rel % alignment != 0 {
                return Err(Diagnostic::new(
                    &path,
                    format!("tensor `{name}` has data offset {}, not a multiple of `general.alignment` = {alignment}", commas(rel)),
                )
                .help("the file is corrupt"));
            }
            let offset = data_start.checked_add(rel);
            let end = offset.and_then(|o| o.checked_add(bytes));
            match (offset, end) {
                (Some(offset), Some(end)) if end <= file_len => {
                    let offset = base + offset;
                    let shape = ne.iter().rev().map(|&d| d as usize).collect();
                    match ggml_type.dtype() {
                        Some(dtype) => tensors.push(TensorInfo { name, shape, dtype, offset, bytes }),
                        None => uncomputable.push(UncomputableTensor { name, shape, ggml_type, offset, bytes }),
                    }
                }
                _ => {
                    return Err(Diagnostic::new(&path, format!("tensor `{name}` runs past the end of the file"))
                        .note(format!(
                            "data offset {} + {} bytes > file size {}",
                            commas(data_start.saturating_add(rel)),
                            commas(bytes),
                            commas(file_len)
                        ))
                        .help("the file may be truncated; re-download it"))
                }
            }
        }
        let mut data = CheckpointBytes::new();
        data.push(mmap);
        Ok(GgufFile { path, version, alignment, infos_end, data_start, metadata, tensors, uncomputable, data, slice_of: BTreeMap::new() })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    fn missing(&self, key: &str) -> Diagnostic {
        Diagnostic::new(&self.path, format!("missing metadata key `{key}`"))
            .help("the checkpoint's converter did not write it; this GGUF cannot be lowered without it")
    }

    fn wrong_type(&self, key: &str, want: &str, v: &MetaValue) -> Diagnostic {
        Diagnostic::new(&self.path, format!("metadata key `{key}` is a {}, expected {want}", v.type_name()))
    }

    pub fn str(&self, key: &str) -> Result<&str, Diagnostic> {
        let v = self.get(key).ok_or_else(|| self.missing(key))?;
        v.as_str().ok_or_else(|| self.wrong_type(key, "a string", v))
    }

    pub fn uint(&self, key: &str) -> Result<u64, Diagnostic> {
        let v = self.get(key).ok_or_else(|| self.missing(key))?;
        v.as_u64().ok_or_else(|| self.wrong_type(key, "an unsigned integer", v))
    }

    pub fn uint_or(&self, key: &str, default: u64) -> Result<u64, Diagnostic> {
        if self.get(key).is_none() {
            return Ok(default);
        }
        self.uint(key)
    }

    pub fn float(&self, key: &str) -> Result<f64, Diagnostic> {
        let v = self.get(key).ok_or_else(|| self.missing(key))?;
        v.as_f64().ok_or_else(|| self.wrong_type(key, "a number", v))
    }

    pub fn float_or(&self, key: &str, default: f64) -> Result<f64, Diagnostic> {
        if self.get(key).is_none() {
            return Ok(default);
        }
        self.float(key)
    }

    pub fn array(&self, key: &str) -> Result<&[MetaValue], Diagnostic> {
        match self.get(key) {
            None => Err(self.missing(key)),
            Some(MetaValue::Array(a)) => Ok(a),
            Some(v) => Err(self.wrong_type(key, "an array", v)),
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        self.data.range(t.offset, t.bytes).expect("a tensor lies in its file (checked when it was read)")
    }
}

fn map_file(path: &Path) -> Result<FileBytes, Diagnostic> {
    let p = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| Diagnostic::new(&p, format!("cannot open checkpoint: {e}")))?;
    FileBytes::map(&file).map_err(|e| Diagnostic::new(&p, format!("cannot map checkpoint: {e}")))
}

/// File `k` (from 1) of the `count` files of the split model whose first
/// file is `first`, by llama.cpp's names (`PREFIX-%05d-of-%05d.gguf`):
/// `None` where `first` is not so named.
fn split_path(first: &Path, count: usize, k: usize) -> Option<std::path::PathBuf> {
    let name = first.file_name()?.to_str()?;
    let suffix = format!("-{:05}-of-{count:05}.gguf", 1);
    let prefix = name.strip_suffix(&suffix).or_else(|| {
        // A later file named: its prefix all the same.
        let tail = format!("-of-{count:05}.gguf");
        let stem = name.strip_suffix(&tail)?;
        stem.get(..stem.len().checked_sub(6)?)
    })?;
    Some(first.with_file_name(format!("{prefix}-{k:05}-of-{count:05}.gguf")))
}
