//! GGUF reader over mmap: versions 2 and 3, every metadata value type, the
//! alignment key. Every count, size and offset read from the file is checked
//! against the bytes that are really there before it is used, so a hostile
//! header fails fast with an error naming the field, never a huge allocation.

use crate::error::{commas, Diagnostic};
use graphc_ir::DType;
use crate::bytes::FileBytes;
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
    pub path: String,
    pub version: u32,
    pub alignment: u64,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    pub mmap: FileBytes,
}

/// GGML type ids (ggml.h `enum ggml_type`) for the types graphc stores.
fn ggml_type(id: u32) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        8 => DType::Q8_0,
        12 => DType::Q4K,
        13 => DType::Q5K,
        14 => DType::Q6K,
        26 => DType::I32,
        30 => DType::BF16,
        _ => return None,
    })
}

fn ggml_type_name(id: u32) -> &'static str {
    match id {
        7 => "q5_1",
        9 => "q8_1",
        10 => "q2_k",
        11 => "q3_k",
        15 => "q8_k",
        16..=23 => "an iq* type",
        24 => "i8",
        25 => "i16",
        27 => "i64",
        28 => "f64",
        _ => "an unknown type",
    }
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
            return Err(Diagnostic::new(self.path, format!("truncated or corrupt GGUF: the header claims {} {what}, more than the file can hold", commas(n)))
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
    pub fn open(path: &Path) -> Result<GgufFile, Diagnostic> {
        let p = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| Diagnostic::new(&p, format!("cannot open checkpoint: {e}")))?;
        let mmap = FileBytes::map(&file).map_err(|e| Diagnostic::new(&p, format!("cannot map checkpoint: {e}")))?;
        Self::parse(p, mmap)
    }

    /// Read a GGUF held in memory; `path` names it in diagnostics.
    pub fn from_bytes(path: &str, bytes: Vec<u8>) -> Result<GgufFile, Diagnostic> {
        Self::parse(path.to_string(), FileBytes::Owned(bytes))
    }

    fn parse(path: String, mmap: FileBytes) -> Result<GgufFile, Diagnostic> {
        let (version, alignment, metadata, infos, data_start) = {
            let mut r = Reader { b: &mmap, pos: 0, path: &path };
            let magic = r.take(4, "the magic number")?;
            if magic != b"GGUF" {
                return Err(Diagnostic::new(&path, "not a GGUF file: wrong magic number")
                    .note(format!("expected the bytes `GGUF`, found {magic:02x?}")));
            }
            let version = r.u32("the version")?;
            if version != 2 && version != 3 {
                return Err(Diagnostic::new(&path, format!("unsupported GGUF version {version}"))
                    .note("graphc reads GGUF versions 2 and 3"));
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
                    _ => {
                        return Err(Diagnostic::new(&path, format!("`general.alignment` is {v:?}, not a power of two")))
                    }
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
            (version, alignment, metadata, infos, data_start)
        };
        let file_len = mmap.len() as u64;
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, ne, ty, rel) in infos {
            let dtype = ggml_type(ty).ok_or_else(|| {
                Diagnostic::new(&path, format!("tensor `{name}` has GGML type {ty} ({}), which graphc does not read", ggml_type_name(ty)))
                    .note("supported: f32, f16, bf16, i32, q4_0, q4_1, q5_0, q8_0, q4_k, q5_k, q6_k")
            })?;
            // Quantized rows are whole blocks (ne[0] is the row length).
            let row = ne.first().copied().unwrap_or(1);
            if dtype.is_quantized() && row % dtype.block_elems() as u64 != 0 {
                return Err(Diagnostic::new(&path, format!(
                    "tensor `{name}` is {dtype} with rows of {row} elements, not a whole number of {}-element blocks",
                    dtype.block_elems()
                )));
            }
            let n_elems = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let bytes = n_elems.and_then(|n| dtype.storage_bytes(n)).ok_or_else(|| {
                Diagnostic::new(&path, format!("tensor `{name}` has shape {ne:?}, not a whole number of {dtype} blocks"))
            })?;
            let offset = data_start.checked_add(rel);
            let end = offset.and_then(|o| o.checked_add(bytes));
            match (offset, end) {
                (Some(offset), Some(end)) if end <= file_len => {
                    let shape = ne.iter().rev().map(|&d| d as usize).collect();
                    tensors.push(TensorInfo { name, shape, dtype, offset, bytes });
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
        Ok(GgufFile { path, version, alignment, metadata, tensors, mmap })
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
        &self.mmap[t.offset as usize..(t.offset + t.bytes) as usize]
    }
}
