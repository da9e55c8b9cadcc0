//! The library's error type: every failure names what was wrong and where.
//! Wrapped errors are `transparent`: with `#[from]` alone an error is also
//! its own source, and a chain printer (anyhow's `{:#}`) prints it twice.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Checkpoint(#[from] graphc_frontends::Diagnostic),
    #[error(transparent)]
    Plan(#[from] graphc_ir::plan::PlanError),
    #[error(transparent)]
    Verify(#[from] graphc_ir::VerifyError),
    #[error(transparent)]
    Pass(#[from] graphc_passes::manager::PassError),
    #[error(transparent)]
    Exec(#[from] graphc_backends::cpu::reference::ExecError),
    #[error(transparent)]
    Gpu(#[from] graphc_gpu::GpuError),
    #[error("plan {plan}: {message}")]
    PlanMismatch { plan: String, message: String },
    #[error("{0}")]
    Option(String),
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Tokenizer(String),
    #[error(transparent)]
    Chat(#[from] graphc_frontends::chat::ChatError),
}
