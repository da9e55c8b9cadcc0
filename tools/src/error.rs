//! The library's error type: every failure names what was wrong and where.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Checkpoint(#[from] graphc_frontends::Diagnostic),
    #[error("{0}")]
    Plan(#[from] graphc_ir::plan::PlanError),
    #[error("{0}")]
    Verify(#[from] graphc_ir::VerifyError),
    #[error("{0}")]
    Pass(#[from] graphc_passes::manager::PassError),
    #[error("{0}")]
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
}
