//! A checkpoint's bytes: mapped from a file (the normal path: weights are
//! used in place, never copied) or owned (checkpoints built in memory, and
//! the fuzz targets, which feed arbitrary bytes through the same readers).

use memmap2::Mmap;

pub enum FileBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Map `file` read-only.
    pub fn map(file: &std::fs::File) -> std::io::Result<FileBytes> {
        // SAFETY: the map is read-only and graphc never writes through it. A
        // file changed underneath a running process is outside what any
        // reader can defend against; a plan pins the file's size and
        // checksum, so the next load notices.
        Ok(FileBytes::Mapped(unsafe { Mmap::map(file) }?))
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}

/// A checkpoint's bytes as one offset space: one file, or a sharded
/// checkpoint's files one after another (a shard's bytes start where the
/// earlier shards' end). A tensor's offset is into this space and its
/// bytes lie in one file.
pub struct CheckpointBytes {
    /// Each file and the offset its first byte has here.
    files: Vec<(u64, FileBytes)>,
    len: u64,
}

impl CheckpointBytes {
    pub fn new() -> CheckpointBytes {
        CheckpointBytes { files: Vec::new(), len: 0 }
    }

    /// A checkpoint of one file.
    pub fn one(file: FileBytes) -> CheckpointBytes {
        let mut b = CheckpointBytes::new();
        b.push(file);
        b
    }

    /// Append a file; returns the offset its first byte has.
    pub fn push(&mut self, file: FileBytes) -> u64 {
        let start = self.len;
        self.len += file.len() as u64;
        self.files.push((start, file));
        start
    }

    /// Bytes in all files together.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at `offset`, where they lie in one file.
    pub fn range(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let i = self.files.partition_point(|(start, _)| *start <= offset).checked_sub(1)?;
        let (start, file) = &self.files[i];
        let at = usize::try_from(offset - start).ok()?;
        file.get(at..at.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The files, in order.
    pub fn into_files(self) -> impl Iterator<Item = FileBytes> {
        self.files.into_iter().map(|(_, f)| f)
    }

    /// Each file's bytes, in order (the whole space, for checksums).
    pub fn files(&self) -> impl Iterator<Item = &[u8]> {
        self.files.iter().map(|(_, f)| &f[..])
    }
}

impl Default for CheckpointBytes {
    fn default() -> Self {
        CheckpointBytes::new()
    }
}
