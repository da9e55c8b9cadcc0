//! Chat templates: a conversation (system, user and assistant turns) rendered
//! into prompt text by the checkpoint's own Jinja template, as transformers'
//! `apply_chat_template` renders it.
//!
//! The environment is transformers': `trim_blocks` and `lstrip_blocks`, loop
//! controls, Python's string / list / dict methods (`startswith`, `strip`,
//! `split`, `items`, ... from minijinja-contrib's `pycompat`),
//! `raise_exception(msg)` (an error naming the template's message) and
//! `strftime_now(fmt)`, and `tojson` as Python's `json.dumps` writes
//! (`pyjson`). The variables are `messages`, `add_generation_prompt`,
//! `tools` (the functions the model may call, as JSON schemas; `none`
//! where there are none, as transformers passes) and the special tokens'
//! text (`bos_token`, `eos_token`). `strftime_now` reads the clock the caller gives
//! (`ChatOptions::now`), UTC; the library reads no time zone.

use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool` (a function's result).
    pub role: String,
    /// The text; `None` (`null`, what OpenAI's clients send beside tool
    /// calls) reaches the template as `none`, as transformers passes it.
    #[serde(default)]
    pub content: Option<String>,
    /// The functions an assistant's turn called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` turn's answer to this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant turn's reasoning, apart from its content (Qwen3's
    /// template reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A function call, as transformers' templates read it (OpenAI's shape,
/// with the arguments a JSON object, not its text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.to_string(), content: Some(content.to_string()), tool_calls: vec![], tool_call_id: None, reasoning_content: None }
    }
    /// An assistant's turn that only calls functions (`content: null`).
    pub fn tool_calls(calls: Vec<ToolCall>) -> Message {
        Message { role: "assistant".into(), content: None, tool_calls: calls, tool_call_id: None, reasoning_content: None }
    }
    pub fn system(content: &str) -> Message {
        Message::new("system", content)
    }
    pub fn user(content: &str) -> Message {
        Message::new("user", content)
    }
    pub fn assistant(content: &str) -> Message {
        Message::new("assistant", content)
    }
}

/// How a conversation is rendered.
#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// Append the opening of the assistant's turn (for generation).
    pub add_generation_prompt: bool,
    /// The time `strftime_now` formats (Llama 3.x templates print the date);
    /// `None`: the system clock.
    pub now: Option<SystemTime>,
    /// More variables the template reads, as transformers'
    /// `apply_chat_template(**kwargs)`: `enable_thinking` (Qwen3),
    /// `date_string` (Llama 3.x), ...
    pub variables: serde_json::Map<String, serde_json::Value>,
    /// The functions the model may call: OpenAI's `tools` entries
    /// (`{"type": "function", "function": {name, description, parameters}}`).
    pub tools: Vec<serde_json::Value>,
    /// Text the assistant's turn starts with, put after the rendered
    /// prompt (a forced tool call's opening, `<tool_call>\n`); not the
    /// template's: `render` leaves it out, `Model::chat_prompt` appends it.
    pub assistant_prefix: String,
}

impl Default for ChatOptions {
    fn default() -> ChatOptions {
        ChatOptions { add_generation_prompt: true, now: None, variables: Default::default(), tools: vec![], assistant_prefix: String::new() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the checkpoint has no `tokenizer.chat_template`")]
    NoTemplate,
    #[error("chat template does not parse: {0}")]
    Parse(String),
    /// The template's own `raise_exception` (e.g. roles out of order).
    #[error("the chat template refused the conversation: {0}")]
    Refused(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// The special tokens' text a template may print.
#[derive(Clone, Debug, Default)]
pub struct TemplateTokens {
    pub bos_token: String,
    pub eos_token: String,
}

/// Render `messages` with `template` (Jinja source).
pub fn render(template: &str, messages: &[Message], tokens: &TemplateTokens, opts: &ChatOptions) -> Result<String, ChatError> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", crate::pyjson::tojson);
    // Values print as Python's `str()` (`{{ x }}`, `x | string`): `1e-05`,
    // `True`, `None`, as transformers' Jinja2 prints them.
    env.add_filter("string", |v: &Value| crate::pyjson::py_str(v));
    env.set_formatter(|out, _state, v| out.write_str(&crate::pyjson::py_str(v)).map_err(|e| JinjaError::new(ErrorKind::WriteFailure, e.to_string())));
    // Jinja2's `iterable` is Python's `iter()` succeeding: not for `none`,
    // numbers or booleans (minijinja's own says yes to `none`, and Qwen3-Coder's
    // `tools is iterable and tools | length > 0` then fails on no tools).
    env.add_test("iterable", |v: &Value| {
        use minijinja::value::ValueKind;
        match v.kind() {
            ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
            ValueKind::Undefined => true,
            _ => v.try_iter().is_ok(),
        }
    });
    env.add_function("raise_exception", |msg: String| -> Result<Value, JinjaError> {
        Err(JinjaError::new(ErrorKind::InvalidOperation, format!("{REFUSED}{msg}")))
    });
    let now = opts.now.unwrap_or_else(SystemTime::now);
    env.add_function("strftime_now", move |fmt: String| -> Result<String, JinjaError> {
        strftime_utc(now, &fmt).map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e))
    });
    env.add_template("chat", template).map_err(|e| ChatError::Parse(describe(&e)))?;
    let ctx = minijinja::context! {
        messages => messages,
        add_generation_prompt => opts.add_generation_prompt,
        tools => (!opts.tools.is_empty()).then_some(&opts.tools),
        documents => Value::from(()),
        bos_token => tokens.bos_token,
        eos_token => tokens.eos_token,
        ..Value::from_serialize(&opts.variables)
    };
    env.get_template("chat").expect("added above").render(ctx).map_err(|e| {
        // The template's own message, where `raise_exception` stopped it.
        let mut err: Option<&JinjaError> = Some(&e);
        while let Some(inner) = err {
            if let Some(msg) = inner.detail().and_then(|d| d.strip_prefix(REFUSED)) {
                return ChatError::Refused(msg.to_string());
            }
            err = std::error::Error::source(inner).and_then(|s| s.downcast_ref::<JinjaError>());
        }
        ChatError::Render(describe(&e))
    })
}

/// Marks a `raise_exception` message inside minijinja's error text.
const REFUSED: &str = "template raised: ";

/// minijinja's error with its chain and the template line it points at.
fn describe(e: &JinjaError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    if let Some(line) = e.line() {
        s.push_str(&format!(" (template line {line})"));
    }
    s
}

/// `time` formatted as Python's `strftime` would in UTC, for the
/// directives chat templates use: `%d %m %y %Y %b %B %a %A %H %M %S %j %e %%`.
pub fn strftime_utc(time: SystemTime, fmt: &str) -> Result<String, String> {
    const MONTHS: [&str; 12] =
        ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let secs = time.duration_since(UNIX_EPOCH).map_err(|_| "strftime_now: the clock is before 1970".to_string())?.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('Y') => out.push_str(&y.to_string()),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => return Err(format!("strftime_now: `%{other}` is not implemented")),
            None => return Err("strftime_now: the format ends in `%`".into()),
        }
    }
    Ok(out)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn strftime_matches_known_dates() {
        // 2026-12-05 14:52:55 UTC, a Saturday (`date -u -d @1796482375`).
        let t = UNIX_EPOCH + Duration::from_secs(1_796_482_375);
        assert_eq!(strftime_utc(t, "%d %b %Y").unwrap(), "05 Dec 2026");
        assert_eq!(strftime_utc(t, "%A %B %e, %y %H:%M:%S day %j %%").unwrap(), "Saturday December  5, 26 14:52:55 day 339 %");
        // 2024-02-29 (leap day), a Thursday.
        let t = UNIX_EPOCH + Duration::from_secs(1_709_164_800);
        assert_eq!(strftime_utc(t, "%Y-%m-%d %a").unwrap(), "2024-02-29 Thu");
        assert!(strftime_utc(t, "%Q").unwrap_err().contains("`%Q`"));
    }

    #[test]
    fn python_methods_and_raise_exception_work() {
        let t = "{% for m in messages %}{% if m.content.startswith('x') %}{{ raise_exception('no x please') }}{% endif %}\
                 [{{ m.role.upper() }}|{{ m.content.strip().split(' ')[0] }}]{% endfor %}{{ strftime_now('%Y') }}";
        let opts = ChatOptions { now: Some(UNIX_EPOCH + Duration::from_secs(1_709_164_800)), ..Default::default() };
        let got = render(t, &[Message::system("  be brief "), Message::user("hi there")], &TemplateTokens::default(), &opts).unwrap();
        assert_eq!(got, "[SYSTEM|be][USER|hi]2024");
        let e = render(t, &[Message::user("xyz")], &TemplateTokens::default(), &opts).unwrap_err();
        assert!(matches!(&e, ChatError::Refused(m) if m == "no x please"), "{e}");
    }
}
