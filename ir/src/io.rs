//! The names of a model graph's inputs and outputs: made by the frontends,
//! added by passes, fed and read by the runtime. One definition each.

/// `i32 [batch, seq]`: the new tokens of each row.
pub const TOKENS: &str = "tokens";
/// `i32 [batch, seq]`: each new token's position in its sequence.
pub const POSITIONS: &str = "positions";
/// `i32 [batch]`: the row (of `batch * seq`) whose logits each sequence returns.
pub const LAST_ROWS: &str = "last_rows";
/// `f32 [batch, vocab]`: the next-token logits of each sequence.
pub const LOGITS: &str = "logits";
/// `i32 [batch]`: how many tokens each row's in-place caches hold (added
/// by the `kv_append` pass).
pub const KV_LENGTHS: &str = "kv_lengths";
/// `i32 [batch]`: how many of each row's new tokens are real (recurrent
/// layers advance by those only).
pub const NEW_LENGTHS: &str = "new_lengths";
