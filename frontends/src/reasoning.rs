//! A reasoning model's thoughts, split from its answer: the text between
//! `<think>` and `</think>` at the start of a turn (Qwen3, QwQ,
//! DeepSeek-R1 and its distills, SmolLM3) is its reasoning, the rest its
//! content — what llama.cpp's `deepseek` reasoning format returns as
//! `reasoning_content`, and Ollama as `thinking`.
//!
//! Only a block that opens the turn counts (after leading whitespace), or
//! one the prompt opened (DeepSeek-R1's template ends its generation
//! prompt with `<think>\n`); a `<think>` later in the answer is content.
//! Reasoning and content are trimmed of the whitespace around the tags.
//! A block never closed (the answer cut by its length) is all reasoning.
//! Streamed, each piece is released as soon as no later text can change
//! which side it falls on: the pieces always join to the whole split.
//!
//! Mistral's reasoning models (Magistral, Ministral 3 Reasoning) think
//! between the control tokens `[THINK]` and `[/THINK]`, which the visible
//! text does not show: there the split reads their ids (`push_token`).
//! gpt-oss thinks in its harmony `analysis` channel (`crate::harmony`),
//! also read by id.

/// The tags a model thinks between.
pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// Mistral's thinking control tokens.
pub const CONTROL_THINK_OPEN: &str = "[THINK]";
pub const CONTROL_THINK_CLOSE: &str = "[/THINK]";
/// What the split reads for Mistral's control tokens: noncharacters, which
/// no visible text holds.
const SENTINEL_OPEN: &str = "\u{FDD0}";
const SENTINEL_CLOSE: &str = "\u{FDD1}";

/// Whether a chat template's model thinks in `<think>` blocks (its
/// template writes or strips them) or Mistral's `[THINK]` ones.
pub fn template_thinks(template: &str) -> bool {
    template.contains(THINK_OPEN)
        || template.contains(THINK_CLOSE)
        || template.contains(CONTROL_THINK_OPEN)
        || crate::harmony::template_is_harmony(template)
}

/// The split for answers of `tok`'s chat template: by harmony's channels
/// where the template writes harmony messages (and the vocabulary has
/// their markup tokens), by Mistral's `[THINK]` / `[/THINK]` ids where the
/// template writes those and each is one token of the vocabulary, else by
/// `<think>` tags; `None` where the template does not think. `opened`: the
/// prompt opened the block.
pub fn split_for(tok: &crate::Tokenizer, opened: bool) -> Option<ThinkSplit> {
    let template = tok.template()?;
    if crate::harmony::template_is_harmony(template) {
        let channels = crate::harmony::Channels::new(crate::harmony::HarmonyTokens::of(tok)?);
        return Some(ThinkSplit { harmony: Some(channels), ..ThinkSplit::new(false) });
    }
    if template.contains(CONTROL_THINK_OPEN) {
        let id = |text: &str| tok.encode_text(text, true).ok().filter(|ids| ids.len() == 1).map(|ids| ids[0]);
        return Some(ThinkSplit {
            controls: Some((id(CONTROL_THINK_OPEN)?, id(CONTROL_THINK_CLOSE)?)),
            ..ThinkSplit::tagged(opened, SENTINEL_OPEN, SENTINEL_CLOSE)
        });
    }
    template_thinks(template).then(|| ThinkSplit::new(opened))
}

/// Whether a prompt leaves the model inside a `<think>` block it opened.
pub fn prompt_opens_thinking(prompt_text: &str) -> bool {
    prompt_text.trim_end().ends_with(THINK_OPEN)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: a `<think>` may still open the turn.
    Start,
    /// Inside the block; `leading`: no reasoning text released yet.
    Thinking { leading: bool },
    /// After the block (or with none); `leading`: no content released yet
    /// after a block (its leading whitespace is dropped).
    Content { leading: bool },
}

/// Streamed text split into reasoning and content.
#[derive(Clone, Debug)]
pub struct ThinkSplit {
    state: State,
    /// Text not yet released: it may still turn out to be a tag, or
    /// whitespace around one.
    pending: String,
    open: &'static str,
    close: &'static str,
    /// Mistral's `[THINK]` and `[/THINK]` ids, read as the tags.
    controls: Option<(u32, u32)>,
    /// A harmony answer's channels (gpt-oss), which then decide alone.
    harmony: Option<crate::harmony::Channels>,
}

impl ThinkSplit {
    /// `opened`: the prompt already opened the block.
    pub fn new(opened: bool) -> ThinkSplit {
        ThinkSplit::tagged(opened, THINK_OPEN, THINK_CLOSE)
    }

    fn tagged(opened: bool, open: &'static str, close: &'static str) -> ThinkSplit {
        let state = if opened { State::Thinking { leading: true } } else { State::Start };
        ThinkSplit { state, pending: String::new(), open, close, controls: None, harmony: None }
    }

    /// The next token (`id`, its visible `text`): as `push`, with Mistral's
    /// thinking control tokens read as the block's tags where they open or
    /// close it, and dropped elsewhere (they show no text).
    pub fn push_token(&mut self, id: u32, text: &str) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.push_token(id, text);
        }
        match self.controls {
            Some((open, _)) if id == open && self.state == State::Start => self.push(SENTINEL_OPEN),
            Some((_, close)) if id == close && matches!(self.state, State::Thinking { .. }) => self.push(SENTINEL_CLOSE),
            Some((open, close)) if id == open || id == close => self.push(""),
            _ => self.push(text),
        }
    }

    /// The next piece of text: what of it (and of earlier pieces) is now
    /// known to be reasoning, and content.
    pub fn push(&mut self, text: &str) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.push(text);
        }
        self.pending.push_str(text);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.state {
                State::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(self.open) {
                        self.pending = rest.to_string();
                        self.state = State::Thinking { leading: true };
                    } else if self.open.starts_with(t) {
                        return (reasoning, content); // whitespace, or a beginning of the tag
                    } else {
                        self.state = State::Content { leading: false };
                    }
                }
                State::Thinking { leading } => {
                    if leading {
                        self.pending = self.pending.trim_start().to_string();
                    }
                    if let Some(at) = self.pending.find(self.close) {
                        reasoning.push_str(self.pending[..at].trim_end());
                        self.pending = self.pending[at + self.close.len()..].to_string();
                        self.state = State::Content { leading: true };
                        continue;
                    }
                    // Hold back a tail that may begin the close tag, and
                    // trailing whitespace (it may precede the tag).
                    let keep = crate::detokenize::tag_prefix_len(&self.pending, self.close);
                    let body = &self.pending[..self.pending.len() - keep];
                    let release = body.trim_end().len();
                    reasoning.push_str(&self.pending[..release]);
                    self.pending = self.pending[release..].to_string();
                    if release > 0 {
                        self.state = State::Thinking { leading: false };
                    }
                    return (reasoning, content);
                }
                State::Content { leading } => {
                    if leading {
                        self.pending = self.pending.trim_start().to_string();
                        if self.pending.is_empty() {
                            return (reasoning, content);
                        }
                    }
                    content.push_str(&self.pending);
                    self.pending.clear();
                    self.state = State::Content { leading: false };
                    return (reasoning, content);
                }
            }
        }
    }

    /// The end of the answer: what was held back, released.
    pub fn finish(&mut self) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.finish();
        }
        let pending = std::mem::take(&mut self.pending);
        match self.state {
            State::Start => (String::new(), pending),
            State::Thinking { .. } => (pending.trim_end().to_string(), String::new()),
            State::Content { leading: true } => (String::new(), pending.trim_start().to_string()),
            State::Content { leading: false } => (String::new(), pending),
        }
    }

    /// The answer's last piece of text, and all that was held back.
    pub fn push_last(&mut self, text: &str) -> (String, String) {
        let (mut r, mut c) = self.push(text);
        let (r2, c2) = self.finish();
        r.push_str(&r2);
        c.push_str(&c2);
        (r, c)
    }

    /// A whole answer split.
    pub fn split(text: &str, opened: bool) -> (String, String) {
        ThinkSplit::new(opened).push_last(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_block_is_the_reasoning() {
        assert_eq!(ThinkSplit::split("<think>\nLet me add.\n2+2=4\n</think>\n\nIt is 4.", false), ("Let me add.\n2+2=4".into(), "It is 4.".into()));
        assert_eq!(ThinkSplit::split("  <think></think>It is 4.", false), ("".into(), "It is 4.".into()));
        // Opened by the prompt (DeepSeek-R1).
        assert_eq!(ThinkSplit::split("Hmm.\n</think>\n\nFour.", true), ("Hmm.".into(), "Four.".into()));
        // Never closed: all reasoning.
        assert_eq!(ThinkSplit::split("<think>\nStill going ", false), ("Still going".into(), "".into()));
        // No block, or one later in the answer: all content, as written.
        assert_eq!(ThinkSplit::split("  It is 4. <think>x</think>", false), ("".into(), "  It is 4. <think>x</think>".into()));
        assert_eq!(ThinkSplit::split("<thin", false), ("".into(), "<thin".into()));
        assert_eq!(ThinkSplit::split("", false), ("".into(), "".into()));
    }

    /// Mistral's control tokens (ids 7 and 8 here) stand for the tags;
    /// the same words as text do not.
    #[test]
    fn mistrals_thinking_control_tokens_are_the_tags() {
        let mut s = ThinkSplit { controls: Some((7, 8)), ..ThinkSplit::tagged(false, SENTINEL_OPEN, SENTINEL_CLOSE) };
        let mut got = (String::new(), String::new());
        for (id, text) in [(7, ""), (1, "Hmm, "), (1, "four."), (8, ""), (1, " It is 4.")] {
            let (r, c) = s.push_token(id, text);
            got.0.push_str(&r);
            got.1.push_str(&c);
        }
        let (r, c) = s.finish();
        got.0.push_str(&r);
        got.1.push_str(&c);
        assert_eq!(got, ("Hmm, four.".to_string(), "It is 4.".to_string()));
        let mut text = ThinkSplit { controls: Some((7, 8)), ..ThinkSplit::tagged(false, SENTINEL_OPEN, SENTINEL_CLOSE) };
        assert_eq!(text.push_token(1, "[THINK]x"), (String::new(), "[THINK]x".to_string()));
        // A control token that neither opens nor closes the block shows nothing.
        let mut s = ThinkSplit { controls: Some((7, 8)), ..ThinkSplit::tagged(false, SENTINEL_OPEN, SENTINEL_CLOSE) };
        let mut all = String::new();
        for (id, text) in [(7, ""), (7, ""), (1, "a"), (8, ""), (8, ""), (1, "b"), (7, "")] {
            let (r, c) = s.push_token(id, text);
            all.push_str(&r);
            all.push('|');
            all.push_str(&c);
        }
        let (r, c) = s.finish();
        assert_eq!(format!("{all}{r}|{c}"), "||a||||b||", "reasoning a, content b, no control token shown");
    }

    /// Streamed in any pieces, the released parts join to the whole split;
    /// nothing of a tag is ever released.
    #[test]
    fn streamed_pieces_join_to_the_whole_split() {
        let texts = [
            "<think>\nLet me add.\n2+2=4\n</think>\n\nIt is 4.",
            "\n <think> a </think> b </think> c",
            "It is <think> not a block </think>.",
            "<think>\n\n</think>\n\n",
            "<think>é 東京 🗾 </thi</think>x",
            "Hmm </ still </think>  done  ",
        ];
        for text in texts {
            for opened in [false, true] {
                let whole = ThinkSplit::split(text, opened);
                let chars: Vec<char> = text.chars().collect();
                for size in 1..=4 {
                    let mut s = ThinkSplit::new(opened);
                    let (mut r, mut c) = (String::new(), String::new());
                    for piece in chars.chunks(size) {
                        let (a, b) = s.push(&piece.iter().collect::<String>());
                        assert!(!a.contains('<') || whole.0.contains('<'), "{text:?}: a tag released as reasoning: {a:?}");
                        r.push_str(&a);
                        c.push_str(&b);
                    }
                    let (a, b) = s.finish();
                    r.push_str(&a);
                    c.push_str(&b);
                    assert_eq!((r, c), whole, "{text:?} in pieces of {size}, opened {opened}");
                }
            }
        }
    }
}
