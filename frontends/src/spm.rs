//! SentencePiece-style tokenization for GGUF `llama` vocabularies (Gemma 3):
//! tokens with scores, no merge list. Written here rather than through the
//! `tokenizers` crate because the GGUF carries scores, not the merges its BPE
//! model needs; the algorithm is SentencePiece's BPE encoding:
//!
//! 1. control and user-defined tokens (`<start_of_turn>`, ...) in the text
//!    are matched verbatim (leftmost, then longest) and never split; one
//!    marked `rstrip` (Phi-3's) takes the whitespace after it into its
//!    match, as Hugging Face's added tokens with `rstrip` do;
//! 2. in the rest, spaces become `▁`, with one in front of each piece of
//!    text at the start or after a special token where the vocabulary says
//!    `add_space_prefix` (Llama 2, Mistral; not Gemma), as llama.cpp does;
//! 3. starting from single characters, the adjacent pair whose concatenation
//!    is a token with the highest score is merged (leftmost on ties), until
//!    no pair is a token;
//! 4. a piece that is not a token is spelled as its UTF-8 bytes (`<0x41>`).

use std::collections::{BinaryHeap, HashMap};

pub struct Spm {
    tokens: Vec<String>,
    scores: Vec<f32>,
    ids: HashMap<String, u32>,
    byte_ids: Vec<Option<u32>>,
    /// Control and user-defined tokens, longest first.
    special: Vec<Special>,
    unk_id: u32,
    add_space_prefix: bool,
}

/// A token matched whole in the text.
struct Special {
    text: String,
    id: u32,
    /// A control token: matched only when special tokens are parsed.
    control: bool,
    /// The whitespace after it is part of its match.
    rstrip: bool,
}

/// A merge candidate: higher score first, then the leftmost.
#[derive(PartialEq)]
struct Candidate {
    score: f32,
    left: usize,
    len: usize,
}

impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

impl Spm {
    /// `rstrip_ids`: the special tokens that take the whitespace after them.
    pub fn new(
        tokens: Vec<String>,
        scores: Vec<f32>,
        special_ids: Vec<u32>,
        control_ids: &[u32],
        rstrip_ids: &[u32],
        unk_id: u32,
        add_space_prefix: bool,
    ) -> Spm {
        let ids: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let byte_ids = (0..256).map(|b| ids.get(&format!("<0x{b:02X}>")).copied()).collect();
        let mut special: Vec<Special> = special_ids
            .iter()
            .filter_map(|&id| {
                let text = tokens.get(id as usize).filter(|t| !t.is_empty())?.clone();
                Some(Special { text, id, control: control_ids.contains(&id), rstrip: rstrip_ids.contains(&id) })
            })
            .collect();
        special.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        Spm { tokens, scores, ids, byte_ids, special, unk_id, add_space_prefix }
    }

    /// Ids of `text`; special tokens in it are matched only with `parse_special`.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The leftmost special token, the longest at that position.
            let hit = self
                .special
                .iter()
                .filter(|s| parse_special || !s.control)
                .filter_map(|s| rest.find(s.text.as_str()).map(|at| (at, s)))
                .min_by(|a, b| a.0.cmp(&b.0).then(b.1.text.len().cmp(&a.1.text.len())));
            match hit {
                Some((at, s)) => {
                    self.encode_piece(&rest[..at], &mut out);
                    out.push(s.id);
                    rest = &rest[at + s.text.len()..];
                    if s.rstrip {
                        rest = rest.trim_start_matches(char::is_whitespace);
                    }
                }
                None => {
                    self.encode_piece(rest, &mut out);
                    rest = "";
                }
            }
        }
        out
    }

    /// Text between special tokens, with its space prefix.
    fn encode_piece(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        if self.add_space_prefix {
            self.encode_plain(&format!(" {text}"), out)
        } else {
            self.encode_plain(text, out)
        }
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let s = text.replace(' ', "\u{2581}");
        // Symbols as byte ranges of `s`, linked left/right; `len == 0` once merged away.
        let mut start: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
        let n = start.len();
        let mut len: Vec<usize> = (0..n).map(|i| start.get(i + 1).copied().unwrap_or(s.len()) - start[i]).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut next: Vec<Option<usize>> = (0..n).map(|i| (i + 1 < n).then_some(i + 1)).collect();
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Candidate>, l: usize, r: usize, start: &[usize], len: &[usize]| {
            let piece = &s[start[l]..start[r] + len[r]];
            if let Some(&id) = self.ids.get(piece) {
                heap.push(Candidate { score: self.scores[id as usize], left: l, len: piece.len() });
            }
        };
        for i in 1..n {
            push(&mut heap, i - 1, i, &start, &len);
        }
        while let Some(c) = heap.pop() {
            let l = c.left;
            let Some(r) = next[l] else { continue };
            // Stale: one side was merged since this candidate was pushed.
            if len[l] == 0 || len[l] + len[r] != c.len {
                continue;
            }
            len[l] += len[r];
            len[r] = 0;
            next[l] = next[r];
            if let Some(nn) = next[r] {
                prev[nn] = Some(l);
            }
            if let Some(p) = prev[l] {
                push(&mut heap, p, l, &start, &len);
            }
            if let Some(nn) = next[l] {
                push(&mut heap, l, nn, &start, &len);
            }
        }
        let mut i = Some(0);
        while let Some(k) = i {
            let piece = &s[start[k]..start[k] + len[k]];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => out.extend(piece.bytes().map(|b| self.byte_ids[b as usize].unwrap_or(self.unk_id))),
            }
            i = next[k];
        }
        start.clear();
    }

    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Text of `ids` (the space prefix of the first piece removed).
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes = self.decode_bytes(ids);
        let text = String::from_utf8_lossy(&bytes);
        match text.strip_prefix(' ') {
            Some(rest) if self.add_space_prefix => rest.to_string(),
            _ => text.into_owned(),
        }
    }

    /// The bytes `ids` spell (`▁` as a space, `<0xNN>` as its byte).
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for &id in ids {
            if let Some(t) = self.tokens.get(id as usize) {
                piece_bytes(t, &mut bytes);
            }
        }
        bytes
    }

    pub fn adds_space_prefix(&self) -> bool {
        self.add_space_prefix
    }
}

/// The bytes a SentencePiece piece spells: `<0xNN>` its byte, else its text
/// with `▁` as a space.
pub fn piece_bytes(piece: &str, out: &mut Vec<u8>) {
    match piece.strip_prefix("<0x").and_then(|h| h.strip_suffix('>')).and_then(|h| u8::from_str_radix(h, 16).ok()) {
        Some(b) if piece.len() == 6 => out.push(b),
        _ => out.extend_from_slice(piece.replace('\u{2581}', " ").as_bytes()),
    }
}
