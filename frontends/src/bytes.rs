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
