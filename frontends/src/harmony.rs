//! OpenAI's harmony format (gpt-oss), read back from an answer's tokens.
//!
//! An answer is a run of messages, each `<|start|>ROLE[ to=RECIPIENT]
//! <|channel|>CHANNEL[ <|constrain|>TYPE]<|message|>BODY`, ended by
//! `<|end|>` (another message follows), `<|call|>` (a tool call's end) or
//! `<|return|>` (the answer's end). The chat template's generation prompt
//! opens the first header (`<|start|>assistant`), so an answer begins
//! inside one. The `analysis` channel is the reasoning; `final` the
//! content; `commentary` addressed `to=functions.NAME` is a call of NAME
//! (its body the JSON arguments), and unaddressed a preamble the user
//! sees (content). The markup tokens are control tokens: they are read by
//! id, never from the visible text (which a user could type).

use serde_json::Value;

/// The harmony control tokens of a vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HarmonyTokens {
    pub start: u32,
    pub end: u32,
    pub message: u32,
    pub channel: u32,
    pub constrain: u32,
    pub ret: u32,
    pub call: u32,
}

impl HarmonyTokens {
    /// The tokens, each one token of `tok`'s vocabulary; `None` where any is not.
    pub fn of(tok: &crate::Tokenizer) -> Option<HarmonyTokens> {
        let id = |text: &str| tok.encode_text(text, true).ok().filter(|ids| ids.len() == 1).map(|ids| ids[0]);
        Some(HarmonyTokens {
            start: id("<|start|>")?,
            end: id("<|end|>")?,
            message: id("<|message|>")?,
            channel: id("<|channel|>")?,
            constrain: id("<|constrain|>")?,
            ret: id("<|return|>")?,
            call: id("<|call|>")?,
        })
    }
}

/// Whether a chat template writes harmony messages.
pub fn template_is_harmony(template: &str) -> bool {
    template.contains("<|channel|>") && template.contains("<|message|>")
}

/// Where a message's body goes.
#[derive(Clone, Debug, PartialEq)]
enum Route {
    Reasoning,
    Content,
    /// A call of the recipient (`functions.NAME`).
    Call(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    /// A message's header so far: its visible text, with `CHANNEL_MARK`
    /// and `CONSTRAIN_MARK` where those tokens stood.
    Header(String),
    Body(Route),
    /// After a message's end, before the next `<|start|>`.
    Between,
}

const CHANNEL_MARK: char = '\u{FDD2}';
const CONSTRAIN_MARK: char = '\u{FDD3}';

/// A harmony answer, read token by token into reasoning, content and calls.
#[derive(Clone, Debug)]
pub struct Channels {
    tokens: HarmonyTokens,
    part: Part,
    /// Each call: its recipient and its body so far.
    calls: Vec<(String, String)>,
}

/// A call read back: its function (the recipient without `functions.`)
/// and its arguments where the body is a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct HarmonyCall {
    pub recipient: String,
    pub body: String,
}

impl HarmonyCall {
    /// The function called (`functions.NAME`) and its JSON-object arguments.
    pub fn function(&self) -> Option<(String, Value)> {
        let name = self.recipient.strip_prefix("functions.")?.to_string();
        let arguments: Value = serde_json::from_str(self.body.trim()).ok()?;
        arguments.is_object().then_some((name, arguments))
    }
}

impl Channels {
    /// An answer to a prompt that opened its first message's header.
    pub fn new(tokens: HarmonyTokens) -> Channels {
        Channels { tokens, part: Part::Header(String::new()), calls: vec![] }
    }

    /// The next token (`id`, its visible `text`): the reasoning and the
    /// content it adds.
    pub fn push_token(&mut self, id: u32, text: &str) -> (String, String) {
        let t = self.tokens;
        match (&mut self.part, id) {
            (_, i) if i == t.start => self.part = Part::Header(String::new()),
            (_, i) if i == t.end || i == t.ret || i == t.call => self.part = Part::Between,
            (Part::Header(h), i) if i == t.channel => h.push(CHANNEL_MARK),
            (Part::Header(h), i) if i == t.constrain => h.push(CONSTRAIN_MARK),
            (Part::Header(h), i) if i == t.message => {
                let route = route(h);
                if let Route::Call(recipient) = &route {
                    self.calls.push((recipient.clone(), String::new()));
                }
                self.part = Part::Body(route);
            }
            // A markup token out of place shows nothing.
            (_, i) if [t.channel, t.constrain, t.message].contains(&i) => {}
            _ => return self.push(text),
        }
        (String::new(), String::new())
    }

    /// Visible text: where the current part puts it.
    pub fn push(&mut self, text: &str) -> (String, String) {
        match &mut self.part {
            Part::Header(h) => {
                h.push_str(text);
                (String::new(), String::new())
            }
            Part::Body(Route::Reasoning) => (text.to_string(), String::new()),
            Part::Body(Route::Call(_)) => {
                self.calls.last_mut().expect("a call opened").1.push_str(text);
                (String::new(), String::new())
            }
            // Text outside any message: the model left the format; it is shown.
            Part::Body(Route::Content) | Part::Between => (String::new(), text.to_string()),
        }
    }

    /// The end of the answer: a header never closed (the model wrote
    /// plain text, not harmony) is content, as written.
    pub fn finish(&mut self) -> (String, String) {
        match std::mem::replace(&mut self.part, Part::Between) {
            Part::Header(h) => (String::new(), h.replace([CHANNEL_MARK, CONSTRAIN_MARK], "")),
            _ => (String::new(), String::new()),
        }
    }

    /// The calls the answer made, in order.
    pub fn calls(&self) -> Vec<HarmonyCall> {
        self.calls.iter().map(|(recipient, body)| HarmonyCall { recipient: recipient.clone(), body: body.clone() }).collect()
    }
}

/// A header's route: `to=RECIPIENT` anywhere in it (before or after the
/// channel) makes a commentary message a call; the channel names the rest.
fn route(header: &str) -> Route {
    let words = |s: &str| {
        s.split(|c: char| c.is_whitespace() || c == CHANNEL_MARK || c == CONSTRAIN_MARK)
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let recipient = words(header).into_iter().find_map(|w| w.strip_prefix("to=").map(str::to_string));
    let channel = header.split_once(CHANNEL_MARK).and_then(|(_, after)| words(after).into_iter().next());
    match (channel.as_deref(), recipient) {
        (Some("analysis"), _) => Route::Reasoning,
        (_, Some(r)) if r.starts_with("functions.") => Route::Call(r),
        _ => Route::Content,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: HarmonyTokens = HarmonyTokens { start: 1, end: 2, message: 3, channel: 4, constrain: 5, ret: 6, call: 7 };

    fn run(tokens: &[(u32, &str)]) -> (String, String, Vec<HarmonyCall>) {
        let mut c = Channels::new(T);
        let (mut r, mut t) = (String::new(), String::new());
        for &(id, text) in tokens {
            let (a, b) = c.push_token(id, text);
            r.push_str(&a);
            t.push_str(&b);
        }
        let (a, b) = c.finish();
        (r + &a, t + &b, c.calls())
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_content() {
        let (r, c, calls) = run(&[
            (4, ""),
            (0, "analysis"),
            (3, ""),
            (0, "The user asks "),
            (0, "for Japan's capital."),
            (2, ""),
            (1, ""),
            (0, "assistant"),
            (4, ""),
            (0, "final"),
            (3, ""),
            (0, "Tokyo."),
            (6, ""),
        ]);
        assert_eq!((r.as_str(), c.as_str(), calls.len()), ("The user asks for Japan's capital.", "Tokyo.", 0));
    }

    /// A call addressed before or after the channel, its constraint, and a
    /// preamble (commentary to no one) shown as content.
    #[test]
    fn commentary_to_a_function_is_a_call() {
        let (r, c, calls) = run(&[
            (4, ""),
            (0, "analysis"),
            (3, ""),
            (0, "Need weather."),
            (2, ""),
            (1, ""),
            (0, "assistant"),
            (4, ""),
            (0, "commentary"),
            (3, ""),
            (0, "Checking…"),
            (2, ""),
            (1, ""),
            (0, "assistant"),
            (4, ""),
            (0, "commentary to=functions.get_weather "),
            (5, ""),
            (0, "json"),
            (3, ""),
            (0, "{\"city\": "),
            (0, "\"Paris\"}"),
            (7, ""),
        ]);
        assert_eq!((r.as_str(), c.as_str()), ("Need weather.", "Checking…"));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].function(), Some(("get_weather".into(), serde_json::json!({"city": "Paris"}))));
        let (_, _, calls) = run(&[(0, " to=functions.f"), (4, ""), (0, "commentary json"), (3, ""), (0, "{}"), (7, "")]);
        assert_eq!(calls[0].function(), Some(("f".into(), serde_json::json!({}))));
    }

    /// The words alone, typed as text, are not the markup; a model that
    /// writes no harmony at all is shown as it wrote.
    #[test]
    fn text_is_not_markup() {
        let (r, c, calls) = run(&[(0, "<|channel|>analysis<|message|>hi")]);
        assert_eq!((r.as_str(), c.as_str(), calls.len()), ("", "<|channel|>analysis<|message|>hi", 0));
    }
}
