//! A string's `pattern` (JSON Schema: an ECMA-262 regular expression that
//! matches anywhere in the string unless anchored) as a DFA the schema
//! automaton advances character by character (`json_schema`); and the
//! string `format`s that are patterns (`date`, `time`, `date-time`,
//! `uuid`, `ipv4`).
//!
//! The pattern is written in ECMA-262's meaning for the `regex` crates'
//! syntax: `\d`, `\w` and `\s` are ECMA's classes (ASCII digits and word
//! characters, ECMA's whitespace), `.` is any character but a line
//! terminator. Lookarounds, backreferences and `\b` are refused (no DFA
//! holds them), as is a pattern whose DFA would be large.
//!
//! A DFA reports a match one byte after it ends (or at the end of the
//! input): a string is admitted once a match state has been seen, or when
//! its end leads to one; a prefix is kept while its state is not dead.

use regex_automata::dfa::{dense, Automaton};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::Anchored;

/// Most bytes a pattern's DFA may take.
const MAX_DFA_BYTES: usize = 4 << 20;

/// ECMA-262's `\s`: its white space and line terminators.
const ECMA_SPACE: &str = r"\t\n\x0B\x0C\r \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\uFEFF";

/// RFC 3339's `full-date`: each month's days, February's 29th in leap years only.
const DATE: &str = r"(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))|(?:\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
/// RFC 3339's `full-time`: `partial-time` (a leap second's `60` allowed) and its offset.
const TIME: &str = r"(?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)";

/// The `pattern` a string `format` is, for the formats written out here
/// (JSON Schema's, as RFC 3339, RFC 4122 and RFC 2673 define them).
pub fn format_pattern(format: &str) -> Option<String> {
    Some(match format {
        "date" => format!("^{DATE}$"),
        "time" => format!("^{TIME}$"),
        "date-time" => format!("^{DATE}[Tt]{TIME}$"),
        "uuid" => "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$".to_string(),
        "ipv4" => r"^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$".to_string(),
        _ => return None,
    })
}

/// A compiled `pattern`.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    dfa: dense::DFA<Vec<u32>>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// Where a string's characters have led a pattern's DFA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternState {
    state: StateID,
    /// A match has been seen: the rest of the string is free.
    matched: bool,
}

impl Pattern {
    /// `source` compiled; `Err` says why not.
    pub fn compile(source: &str) -> Result<Pattern, String> {
        let translated = translate(source)?;
        let dfa = dense::Builder::new()
            .configure(dense::Config::new().start_kind(regex_automata::dfa::StartKind::Unanchored).dfa_size_limit(Some(MAX_DFA_BYTES)))
            .build(&translated)
            .map_err(|e| format!("cannot be compiled to a DFA: {e}"))?;
        Ok(Pattern { source: source.to_string(), dfa })
    }

    /// The state at the start of a string.
    pub fn start(&self) -> PatternState {
        let config = start::Config::new().anchored(Anchored::No);
        let state = self.dfa.start_state(&config).expect("an unanchored start state exists (the DFA is built for it)");
        PatternState { state, matched: false }
    }

    /// After the string's next bytes (a character's UTF-8, unescaped);
    /// `None` where no string going on so can match.
    pub fn step(&self, at: PatternState, bytes: &[u8]) -> Option<PatternState> {
        if at.matched {
            return Some(at);
        }
        let mut state = at.state;
        for &b in bytes {
            state = self.dfa.next_state(state, b);
            if self.dfa.is_match_state(state) {
                return Some(PatternState { state, matched: true });
            }
            if self.dfa.is_dead_state(state) {
                return None;
            }
        }
        Some(PatternState { state, matched: false })
    }

    /// Whether a string that ends here matches.
    pub fn ends_matched(&self, at: PatternState) -> bool {
        at.matched || self.dfa.is_match_state(self.dfa.next_eoi_state(at.state))
    }
}

/// `source` (ECMA-262) in the `regex` crates' syntax: ECMA's classes
/// spelled out, `.` without line terminators; what has no DFA refused.
fn translate(source: &str) -> Result<String, String> {
    let mut out = String::with_capacity(source.len() * 2);
    let mut chars = source.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else { return Err("ends in a lone `\\`".into()) };
                let (outside, inside) = match e {
                    'd' => ("[0-9]".to_string(), Some("0-9".to_string())),
                    'D' => ("[^0-9]".to_string(), None),
                    'w' => ("[A-Za-z0-9_]".to_string(), Some("A-Za-z0-9_".to_string())),
                    'W' => ("[^A-Za-z0-9_]".to_string(), None),
                    's' => (format!("[{ECMA_SPACE}]"), Some(ECMA_SPACE.to_string())),
                    'S' => (format!("[^{ECMA_SPACE}]"), None),
                    'b' | 'B' if !in_class => return Err(format!("`\\{e}` (a word boundary) is not implemented")),
                    '1'..='9' => return Err(format!("`\\{e}` (a backreference) is not implemented")),
                    'k' => return Err("`\\k` (a named backreference) is not implemented".into()),
                    'c' => return Err("`\\c` (a control escape) is not implemented".into()),
                    other => (format!("\\{other}"), Some(format!("\\{other}"))),
                };
                if in_class {
                    out.push_str(&inside.ok_or_else(|| format!("`\\{e}` inside a character class is not implemented"))?);
                } else {
                    out.push_str(&outside);
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A leading `]` is a literal in the `regex` syntax, an empty class in ECMA's.
                if chars.peek() == Some(&']') {
                    return Err("`[]` (an empty class) is not implemented".into());
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '[' if in_class => out.push_str("\\["),
            '.' if !in_class => out.push_str(r"[^\n\r\u2028\u2029]"),
            '(' if !in_class && chars.peek() == Some(&'?') => {
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("?=") || rest.starts_with("?!") || rest.starts_with("?<=") || rest.starts_with("?<!") {
                    return Err("lookarounds are not implemented".into());
                }
                if rest.starts_with("?<") {
                    return Err("named groups are not implemented".into());
                }
                out.push('(');
            }
            other => out.push(other),
        }
    }
    if in_class {
        return Err("an unclosed `[`".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(p: &Pattern, s: &str) -> bool {
        let mut at = p.start();
        for c in s.chars() {
            let mut buf = [0u8; 4];
            match p.step(at, c.encode_utf8(&mut buf).as_bytes()) {
                Some(next) => at = next,
                None => return false,
            }
        }
        p.ends_matched(at)
    }

    /// ECMA's meaning: unanchored unless `^`/`$` say so, `\d` ASCII only,
    /// `.` no line terminator; each against strings it must tell apart.
    #[test]
    fn patterns_match_as_ecma_262_reads_them() {
        let date = Pattern::compile(r"^\d{4}-\d{2}-\d{2}$").unwrap();
        assert!(matches(&date, "2026-12-07"));
        for bad in ["2026-12-7", "x2026-12-07", "2026-12-07x", "２０２６-12-07", "2026-١٢-07"] {
            assert!(!matches(&date, bad), "{bad}");
        }
        let anywhere = Pattern::compile("ab+c").unwrap();
        assert!(matches(&anywhere, "xxabbbcyy") && !matches(&anywhere, "xxacyy"));
        let dot = Pattern::compile("^a.b$").unwrap();
        assert!(matches(&dot, "a-b") && matches(&dot, "aéb") && !matches(&dot, "a\nb") && !matches(&dot, "a\u{2028}b"));
        let word = Pattern::compile(r"^[\w-]+$").unwrap();
        assert!(matches(&word, "a_b-9") && !matches(&word, "é"));
        let space = Pattern::compile(r"^\s$").unwrap();
        assert!(matches(&space, "\u{FEFF}") && !matches(&space, "\u{85}"), "ECMA's \\s: BOM yes, NEL no");
        for (bad, why) in
            [(r"(?=a)", "lookarounds"), (r"(a)\1", "backreference"), (r"\bword", "word boundary"), (r"[\D]", "inside a character class")]
        {
            let e = Pattern::compile(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// The formats as the RFCs define them, each against near misses.
    #[test]
    fn formats_are_the_rfcs_strings() {
        let format = |f: &str| Pattern::compile(&format_pattern(f).unwrap()).unwrap();
        let cases = [
            (
                "date",
                vec!["2026-12-07", "2024-02-29", "2000-02-29", "1999-12-31"],
                vec!["2023-02-29", "1900-02-29", "2026-04-31", "2026-13-01", "2026-1-07"],
            ),
            (
                "date-time",
                vec!["2026-12-07T17:00:00Z", "2026-12-07t17:00:00.123+01:00", "2016-12-31T23:59:60Z"],
                vec!["2026-12-07 17:00:00Z", "2026-12-07T24:00:00Z", "2026-12-07T17:00:00", "2026-12-07T17:00Z"],
            ),
            ("time", vec!["17:00:00Z", "08:30:15.5-05:00"], vec!["17:00:00", "7:00:00Z"]),
            ("uuid", vec!["123e4567-e89b-12d3-a456-426614174000"], vec!["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"]),
            ("ipv4", vec!["192.168.0.1", "255.255.255.255", "0.0.0.0"], vec!["256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1."]),
        ];
        for (name, good, bad) in cases {
            let p = format(name);
            for g in good {
                assert!(matches(&p, g), "{name}: {g}");
            }
            for b in bad {
                assert!(!matches(&p, b), "{name}: {b}");
            }
        }
        assert!(format_pattern("email").is_none());
    }

    /// A prefix that can still match is kept; one that cannot is dead at once.
    #[test]
    fn a_prefix_that_cannot_match_is_refused_at_its_first_wrong_character() {
        let date = Pattern::compile(r"^\d{4}-\d{2}-\d{2}$").unwrap();
        let at = date.step(date.start(), b"2026").unwrap();
        assert!(date.step(at, b"-").is_some() && date.step(at, b"0").is_none() && !date.ends_matched(at));
    }
}
