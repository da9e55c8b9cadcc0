//! `graphc dump`: print the graph at a stage, as IR text or Graphviz.

use crate::common::*;
use anyhow::{Context, Result};
use graphc_ir::text;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    model: PathBuf,
    #[arg(long, value_enum, default_value = "optimized")]
    stage: Stage,
    /// Only these layers, e.g. `0..1` (end exclusive); the rest are summarized.
    #[arg(long)]
    layers: Option<String>,
    /// `text` (the IR text form) or `dot` (Graphviz: `| dot -Tsvg > g.svg`).
    #[arg(long, value_enum, default_value = "text")]
    format: DumpFormat,
    #[command(flatten)]
    opts: CompileArgs,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { model, stage, layers, format, opts } = self;
        let m = open(&model, &opts.options()?)?;
        let graph = match stage {
            Stage::Optimized => m.graph(),
            Stage::Lowered => m.lowered_graph().context("--stage lowered needs a checkpoint (a plan holds only the optimized graph)")?,
        };
        let (a, b) = match layers {
            None => (0, u32::MAX),
            Some(spec) => {
                let (a, b) = spec.split_once("..").context("--layers takes A..B, e.g. 0..1")?;
                (a.trim().parse().context("--layers: start is not a number")?, b.trim().parse().context("--layers: end is not a number")?)
            }
        };
        let keep = |l: u32| l >= a && l < b;
        let out = match format {
            DumpFormat::Text => text::print_filtered(graph, keep),
            DumpFormat::Dot => graphc_ir::dot::to_dot(graph, keep),
        };
        print!("{out}");
        Ok(())
    }
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq)]
enum DumpFormat {
    Text,
    Dot,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq)]
enum Stage {
    Lowered,
    Optimized,
}
