//! Streaming text out: generated ids become text a token at a time, never
//! a broken UTF-8 sequence (a token may end inside a character: byte-level
//! BPE splits emoji and CJK across tokens), with stop strings held back
//! until they can no longer match.

use crate::tokenizer::Tokenizer;

/// What one token added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Emitted {
    /// Text now safe to print.
    pub text: String,
    /// A stop string matched: `text` ends just before it, and nothing
    /// more is emitted.
    pub stopped: bool,
}

pub struct Detokenizer<'t> {
    tokenizer: &'t Tokenizer,
    show_special: bool,
    stops: Vec<String>,
    /// Bytes of an unfinished UTF-8 character.
    partial: Vec<u8>,
    /// Text that may be the start of a stop string.
    held: String,
    stopped: bool,
}

impl<'t> Detokenizer<'t> {
    /// Control tokens' text is left out unless `show_special`; empty stop
    /// strings are ignored.
    pub fn new(tokenizer: &'t Tokenizer, show_special: bool, stops: &[String]) -> Detokenizer<'t> {
        let stops = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        Detokenizer { tokenizer, show_special, stops, partial: Vec::new(), held: String::new(), stopped: false }
    }

    pub fn push(&mut self, id: u32) -> Emitted {
        if self.stopped {
            return Emitted { text: String::new(), stopped: true };
        }
        self.partial.extend(self.tokenizer.decode_bytes(&[id], self.show_special));
        let complete = complete_prefix(&self.partial);
        let bytes: Vec<u8> = self.partial.drain(..complete).collect();
        self.held.push_str(&String::from_utf8_lossy(&bytes));
        self.release()
    }

    /// The rest at the end of a generation (an unfinished character as
    /// U+FFFD).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let partial = std::mem::take(&mut self.partial);
        self.held.push_str(&String::from_utf8_lossy(&partial));
        std::mem::take(&mut self.held)
    }

    /// Emit what cannot be the start of a stop string; stop at one.
    fn release(&mut self) -> Emitted {
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.stopped = true;
            let text = self.held[..at].to_string();
            self.held.clear();
            return Emitted { text, stopped: true };
        }
        // Keep the longest tail that begins some stop string.
        let keep =
            self.held.char_indices().map(|(i, _)| i).find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..]))).unwrap_or(self.held.len());
        let text = self.held[..keep].to_string();
        self.held.drain(..keep);
        Emitted { text, stopped: false }
    }
}

/// The length of the longest prefix of `bytes` that does not end inside a
/// UTF-8 character that more bytes could finish (invalid bytes count as
/// complete: they become U+FFFD).
fn complete_prefix(bytes: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match std::str::from_utf8(&bytes[at..]) {
            Ok(_) => return bytes.len(),
            Err(e) => match e.error_len() {
                Some(bad) => at += e.valid_up_to() + bad,
                None => return at + e.valid_up_to(),
            },
        }
    }
}

/// The length of the longest tail of `text` that is a proper beginning of
/// `tag`: what streaming holds back while the tag may still be coming.
pub(crate) fn tag_prefix_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1)).rev().find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::complete_prefix;

    #[test]
    fn an_unfinished_character_is_held_and_a_bad_byte_is_not() {
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(complete_prefix(&euro[..2]), 0);
        assert_eq!(complete_prefix(&[b'a', euro[0]]), 1);
        assert_eq!(complete_prefix(euro), 3);
        assert_eq!(complete_prefix(&[0xFF, b'a']), 2);
        assert_eq!(complete_prefix(&[0xFF, euro[0], euro[1]]), 1);
    }
}
