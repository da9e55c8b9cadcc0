//! One file per `graphc` command: its arguments and what it does.

pub mod bench;
pub mod chat;
pub mod compile;
pub mod dump;
pub mod inspect;
pub mod run;
pub mod serve;
