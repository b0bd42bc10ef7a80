pub mod run;
pub mod trace;
