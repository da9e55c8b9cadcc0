//! A conversation that keeps its KV cache between turns: each turn renders
//! the whole conversation with the checkpoint's chat template, finds how
//! much of it the cache already holds (the longest common prefix of ids),
//! and prefills only the rest. Where the template rewrote earlier text (the
//! common prefix is shorter than the cache), the cache is cut back to it, or
//! refilled from empty where it cannot be cut (recurrent states, or window
//! rings that have wrapped since).

use crate::error::Error;
use crate::model::Model;
use crate::sampling::Sampling;
use crate::session::{Finish, GoOn, Session, SessionOptions};
use graphc_frontends::chat::{ChatOptions, Message};

pub struct Conversation<'m> {
    model: &'m Model,
    session: Session<'m>,
    system: Option<String>,
    history: Vec<Message>,
    /// The chat template's variables (`enable_thinking`, ...).
    variables: serde_json::Map<String, serde_json::Value>,
    /// The ids the cache holds, in order.
    cached: Vec<u32>,
}

/// One answered turn.
#[derive(Clone, Debug)]
pub struct Turn {
    /// Prompt ids run this turn (the rest came from the cache).
    pub prefilled: usize,
    /// Prompt ids the cache already held.
    pub reused: usize,
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish: Finish,
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

impl<'m> Conversation<'m> {
    pub fn new(model: &'m Model, opts: &SessionOptions, system: Option<String>) -> Result<Conversation<'m>, Error> {
        model.tokenizer()?;
        Ok(Conversation { model, session: model.session(opts)?, system, history: Vec::new(), variables: Default::default(), cached: Vec::new() })
    }

    /// Set (or with `None` drop) a variable of the chat template, for the
    /// turns to come (`enable_thinking` for thinking models).
    pub fn set_variable(&mut self, name: &str, value: Option<serde_json::Value>) {
        match value {
            Some(v) => self.variables.insert(name.to_string(), v),
            None => self.variables.remove(name),
        };
    }

    fn chat_options(&self) -> ChatOptions {
        ChatOptions { variables: self.variables.clone(), ..ChatOptions::default() }
    }

    /// Whether the prompt of `user`'s turn would leave the model inside a
    /// `<think>` block (DeepSeek-R1's templates open it).
    pub fn opens_thinking(&self, user: &str) -> bool {
        let mut messages = self.messages();
        messages.push(Message::user(user));
        let text = self.model.tokenizer().ok().and_then(|t| t.apply_chat_template(&messages, &self.chat_options()).ok());
        text.is_some_and(|t| graphc_frontends::reasoning::prompt_opens_thinking(&t))
    }

    pub fn session(&self) -> &Session<'m> {
        &self.session
    }

    /// Tokens in the cache.
    pub fn context_used(&self) -> usize {
        self.cached.len()
    }

    /// Forget the turns (the system message stays).
    pub fn reset(&mut self) {
        self.history.clear();
    }

    /// Set (or with `None` drop) the system message; the turns stay.
    pub fn set_system(&mut self, system: Option<String>) {
        self.system = system;
    }

    pub fn messages(&self) -> Vec<Message> {
        self.system.iter().map(|s| Message::system(s)).chain(self.history.iter().cloned()).collect()
    }

    /// Answer `user`: up to `max_new` tokens, each passed to `on_token`
    /// (which may stop the answer). The turn and its answer (its text,
    /// without special tokens) join the history. A prompt that does not fit
    /// `max_seq` is refused and leaves the conversation as it was.
    pub fn send<C: GoOn>(&mut self, user: &str, max_new: usize, sampling: &Sampling, on_token: impl FnMut(u32) -> C) -> Result<Turn, Error> {
        let mut messages = self.messages();
        messages.push(Message::user(user));
        let ids = self.model.chat_prompt(&messages, &self.chat_options())?;
        let max_seq = self.session.resolved().max_seq;
        if ids.len() >= max_seq {
            return Err(Error::Input(format!(
                "the context is full: the conversation is {} tokens with this message, max_seq is {max_seq} (/reset to start over)",
                ids.len()
            )));
        }
        // What the cache holds of this prompt; at least one id is run, for its logits.
        let mut reused = self.cached.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        if reused < self.cached.len() && self.session.truncate(reused).is_err() {
            self.session.reset();
            reused = 0;
        }
        self.cached.truncate(reused);
        let tok = self.model.tokenizer()?;
        let g = self.session.generate_after(&ids[reused..], max_new, sampling, on_token)?;
        self.cached.extend_from_slice(&ids[reused..]);
        // Every generated token but the last was run (the last only sampled).
        self.cached.extend_from_slice(&g.tokens[..g.tokens.len().saturating_sub(1)]);
        let text = String::from_utf8_lossy(&tok.decode_bytes(&g.tokens, false)).into_owned();
        self.history.push(Message::user(user));
        self.history.push(Message::assistant(&text));
        Ok(Turn {
            prefilled: ids.len() - reused,
            reused,
            tokens: g.tokens,
            text,
            finish: g.finish,
            prefill_secs: g.prefill_secs,
            decode_secs: g.decode_secs,
        })
    }
}
