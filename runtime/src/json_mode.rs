//! JSON mode (OpenAI's `response_format: {"type": "json_object"}`): the
//! sampler may only pick a token whose bytes keep the text so far a prefix
//! of a JSON object (RFC 8259, UTF-8), and an end token only once the object
//! is closed. Why our own automaton and not a grammar crate: the check runs
//! for every token of the vocabulary at a sampled step, so it is a small
//! `Copy` state advanced a byte at a time with no allocation.
//!
//! Whitespace outside strings is capped at `MAX_BLANK_RUN` bytes in a row
//! and nesting at `MAX_DEPTH`: a model that would pad or nest forever is
//! steered to close the object instead.

/// Deepest nesting of objects and arrays.
pub const MAX_DEPTH: usize = 32;
/// Most whitespace bytes in a row outside strings (room for an indented
/// line of pretty-printed JSON).
pub const MAX_BLANK_RUN: u8 = 64;

/// What the next byte may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Before the object: whitespace, then `{`.
    Start,
    /// A value (after `:`, or `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    ArrayFirst,
    /// After `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value: `,` or the container's close.
    AfterValue,
    /// Inside a string (a key where `key`).
    Str { key: bool, lex: StrLex },
    /// Inside a number, at stage `NumStage`.
    Num(NumStage),
    /// Inside `true`, `false` or `null`: the literal's remaining bytes.
    Literal { word: &'static [u8], at: u8 },
    /// The object is closed: nothing more.
    Done,
}

/// Where a string is: after a `\` (`escape`), or with `hex` digits of a
/// `\u` escape or `utf8` continuation bytes to come. Shared with
/// `json_schema`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StrLex {
    escape: bool,
    hex: u8,
    utf8: u8,
}

/// Whether `bytes`, inside a string with nothing pending, are all taken
/// and leave nothing pending (no quote, backslash or control byte; whole
/// characters).
pub fn plain_in_string(bytes: &[u8]) -> bool {
    let mut lex = StrLex::default();
    for &b in bytes {
        match lex.step(b) {
            Some(StrStep::Inside(next)) => lex = next,
            _ => return false,
        }
    }
    lex == StrLex::default()
}

/// What a byte does to a string: keeps it open, closes it (`"`), or
/// cannot stand there (`None`).
pub(crate) enum StrStep {
    Inside(StrLex),
    Closed,
}

impl StrLex {
    /// Whether the next byte follows a `\` (names an escape).
    pub(crate) fn in_escape(self) -> bool {
        self.escape
    }

    /// Whether the next byte is the first hex digit of a `\u` escape.
    pub(crate) fn starts_unicode_escape(self) -> bool {
        self.hex == 4
    }

    pub(crate) fn step(self, b: u8) -> Option<StrStep> {
        let inside = |escape, hex, utf8| Some(StrStep::Inside(StrLex { escape, hex, utf8 }));
        if self.utf8 > 0 {
            return (0x80..=0xBF).contains(&b).then(|| StrStep::Inside(StrLex { utf8: self.utf8 - 1, ..StrLex::default() }));
        }
        if self.hex > 0 {
            return b.is_ascii_hexdigit().then(|| StrStep::Inside(StrLex { hex: self.hex - 1, ..StrLex::default() }));
        }
        if self.escape {
            return match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => inside(false, 0, 0),
                b'u' => inside(false, 4, 0),
                _ => None,
            };
        }
        match b {
            b'"' => Some(StrStep::Closed),
            b'\\' => inside(true, 0, 0),
            0x00..=0x1F => None,
            0x20..=0x7F => inside(false, 0, 0),
            0xC2..=0xDF => inside(false, 0, 1),
            0xE0..=0xEF => inside(false, 0, 2),
            0xF0..=0xF4 => inside(false, 0, 3),
            _ => None,
        }
    }
}

/// Where a number is: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?
/// Shared with `json_schema` (whose integers take no fraction or exponent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumStage {
    /// After `-`: a digit.
    Minus,
    /// After a leading `0`: `.`, an exponent, or the end.
    Zero,
    /// In the integer digits.
    Int,
    /// After `.`: a digit.
    Dot,
    /// In the fraction digits.
    Frac,
    /// After `e`: a sign or a digit.
    Exp,
    /// After the exponent's sign: a digit.
    ExpSign,
    /// In the exponent digits.
    ExpDigits,
}

impl NumStage {
    /// The stage a number's first byte starts.
    pub(crate) fn start(b: u8) -> Option<NumStage> {
        match b {
            b'-' => Some(NumStage::Minus),
            b'0' => Some(NumStage::Zero),
            b'1'..=b'9' => Some(NumStage::Int),
            _ => None,
        }
    }

    /// Whether the number may end here.
    pub(crate) fn complete(self) -> bool {
        matches!(self, NumStage::Zero | NumStage::Int | NumStage::Frac | NumStage::ExpDigits)
    }

    /// The stage after byte `b`, if `b` continues the number (an
    /// `integer` takes no fraction or exponent).
    pub(crate) fn next(self, b: u8, integer: bool) -> Option<NumStage> {
        use NumStage::*;
        let digit = b.is_ascii_digit();
        Some(match (self, b) {
            (Minus, b'0') => Zero,
            (Minus, _) if digit => Int,
            (Int, _) if digit => Int,
            (Zero | Int, b'.') if !integer => Dot,
            (Dot | Frac, _) if digit => Frac,
            (Zero | Int | Frac, b'e' | b'E') if !integer => Exp,
            (Exp, b'+' | b'-') => ExpSign,
            (Exp | ExpSign | ExpDigits, _) if digit => ExpDigits,
            _ => return None,
        })
    }
}

/// A prefix of a JSON object, as a state advanced byte by byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonPrefix {
    /// Open containers, innermost last: `{` or `[`.
    stack: [u8; MAX_DEPTH],
    depth: u8,
    mode: Mode,
    blank_run: u8,
}

impl Default for JsonPrefix {
    fn default() -> Self {
        JsonPrefix { stack: [0; MAX_DEPTH], depth: 0, mode: Mode::Start, blank_run: 0 }
    }
}

impl JsonPrefix {
    /// Whether it is inside a string with nothing pending (no escape, no
    /// partial character): any `plain_in_string` bytes keep it so.
    pub fn in_clean_string(&self) -> bool {
        matches!(self.mode, Mode::Str { lex, .. } if lex == StrLex::default())
    }

    /// Whether the object is closed (only an end token may follow).
    pub fn is_done(&self) -> bool {
        self.mode == Mode::Done
    }

    /// Feed `bytes`; `false` (and the state unspecified) where one of them
    /// cannot continue the prefix.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.byte(b))
    }

    fn byte(&mut self, b: u8) -> bool {
        let blank = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        match self.mode {
            Mode::Str { key, lex } => {
                self.mode = match lex.step(b) {
                    Some(StrStep::Inside(lex)) => Mode::Str { key, lex },
                    Some(StrStep::Closed) if key => Mode::Colon,
                    Some(StrStep::Closed) => Mode::AfterValue,
                    None => return false,
                };
                return true;
            }
            Mode::Literal { word, at } => {
                if word.get(at as usize) != Some(&b) {
                    return false;
                }
                self.mode = if at as usize + 1 == word.len() { Mode::AfterValue } else { Mode::Literal { word, at: at + 1 } };
                return true;
            }
            Mode::Num(stage) => {
                if let Some(next) = stage.next(b, false) {
                    self.mode = Mode::Num(next);
                    return true;
                }
                if !stage.complete() {
                    return false;
                }
                // The number ended: `b` is what follows a value.
                self.mode = Mode::AfterValue;
            }
            _ => {}
        }
        if blank {
            if self.mode == Mode::Done || self.blank_run >= MAX_BLANK_RUN {
                return false;
            }
            self.blank_run += 1;
            return true;
        }
        self.blank_run = 0;
        match self.mode {
            Mode::Start => b == b'{' && self.open(b),
            Mode::ObjectFirst if b == b'}' => self.close(b'{'),
            Mode::ObjectFirst | Mode::Key => {
                self.mode = Mode::Str { key: true, lex: StrLex::default() };
                b == b'"'
            }
            Mode::Colon => {
                self.mode = Mode::Value;
                b == b':'
            }
            Mode::ArrayFirst if b == b']' => self.close(b'['),
            Mode::Value | Mode::ArrayFirst => self.value_start(b),
            Mode::AfterValue => match (b, self.top()) {
                (b',', Some(b'{')) => {
                    self.mode = Mode::Key;
                    true
                }
                (b',', Some(b'[')) => {
                    self.mode = Mode::Value;
                    true
                }
                (b'}', Some(b'{')) => self.close(b'{'),
                (b']', Some(b'[')) => self.close(b'['),
                _ => false,
            },
            Mode::Done => false,
            Mode::Str { .. } | Mode::Literal { .. } | Mode::Num(_) => unreachable!("handled above"),
        }
    }

    fn top(&self) -> Option<u8> {
        self.depth.checked_sub(1).map(|d| self.stack[d as usize])
    }

    fn open(&mut self, b: u8) -> bool {
        if self.depth as usize == MAX_DEPTH {
            return false;
        }
        self.stack[self.depth as usize] = b;
        self.depth += 1;
        self.mode = if b == b'{' { Mode::ObjectFirst } else { Mode::ArrayFirst };
        true
    }

    fn close(&mut self, opener: u8) -> bool {
        if self.top() != Some(opener) {
            return false;
        }
        self.depth -= 1;
        self.mode = if self.depth == 0 { Mode::Done } else { Mode::AfterValue };
        true
    }

    fn value_start(&mut self, b: u8) -> bool {
        self.mode = match b {
            b'{' | b'[' => return self.open(b),
            b'"' => Mode::Str { key: false, lex: StrLex::default() },
            b'-' | b'0'..=b'9' => Mode::Num(NumStage::start(b).expect("a number's first byte")),
            b't' => Mode::Literal { word: b"true", at: 1 },
            b'f' => Mode::Literal { word: b"false", at: 1 },
            b'n' => Mode::Literal { word: b"null", at: 1 },
            _ => return false,
        };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(text: &str) -> bool {
        let mut s = JsonPrefix::default();
        s.feed(text.as_bytes())
    }

    fn complete(text: &str) -> bool {
        let mut s = JsonPrefix::default();
        s.feed(text.as_bytes()) && s.is_done()
    }

    #[test]
    fn objects_are_accepted_whole_and_as_prefixes() {
        let docs = [
            r#"{}"#,
            r#" {"a": 1}"#,
            r#"{"name": "Ada", "age": 36, "tags": ["x", "y\n\u00e9"], "ok": true, "none": null, "f": -0.5e+10, "z": 0}"#,
            "{\n  \"nested\": {\"deep\": [[], {}, [1, 2.25, -3E2]]},\n  \"unicode\": \"日本 ✓\"\n}",
            r#"{"esc": "\"\\\/\b\f\n\r\t"}"#,
        ];
        for doc in docs {
            assert!(complete(doc), "{doc}");
            // serde_json agrees it is an object.
            assert!(serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(doc).is_ok(), "{doc}");
            for cut in (0..doc.len()).filter(|&i| doc.is_char_boundary(i)) {
                assert!(accepts(&doc[..cut]), "prefix {:?}", &doc[..cut]);
                if cut < doc.len() && !doc[cut..].trim().is_empty() {
                    assert!(!complete(&doc[..cut]), "not yet closed: {:?}", &doc[..cut]);
                }
            }
        }
    }

    #[test]
    fn the_likely_mistakes_are_refused_at_their_byte() {
        let bad = [
            "[1]", // not an object
            "\"s\"",
            "{a",
            "{\"a\" 1}",
            "{\"a\": 01}",
            "{\"a\": 1.}",
            "{\"a\": 1e}",
            "{\"a\": -}",
            "{\"a\": tru}",
            "{\"a\": True}",
            "{\"a\": 1,}",
            "{\"a\": [1,]}",
            "{\"a\": [1}",
            "{\"a\": \"\u{1}\"}",
            "{\"a\": \"\\x\"}",
            "{\"a\": \"\\u12G4\"}",
            "{} x",
            "{}{}",
        ];
        for doc in bad {
            assert!(!complete(doc), "{doc:?} must not be a complete object");
            assert!(serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(doc).is_err(), "{doc:?}");
        }
        // A number ends at the close; a literal must be whole.
        assert!(complete("{\"a\": 10}") && !accepts("{\"a\": nul}"));
        // Invalid UTF-8 inside a string.
        let mut s = JsonPrefix::default();
        assert!(!s.feed(b"{\"a\": \"\xff\"}"));
        let mut s = JsonPrefix::default();
        assert!(!s.feed(b"{\"a\": \"\xc3\x28\"}"));
    }

    #[test]
    fn nesting_and_blank_runs_are_capped() {
        let deep = "{\"a\": ".to_string() + &"[".repeat(MAX_DEPTH - 1);
        assert!(accepts(&deep));
        assert!(!accepts(&(deep + "[")));
        let blank = "{".to_string() + &" ".repeat(MAX_BLANK_RUN as usize);
        assert!(accepts(&blank));
        assert!(!accepts(&(blank + " ")));
        // Inside a string, any run of spaces.
        assert!(accepts(&("{\"a\": \"".to_string() + &" ".repeat(500))));
    }
}
