//! Rendering: pure exporters from figures and verdicts to bytes (CSV, JSON, plots, the
//! terminal table, HTML pages, JUnit XML, the timeline trace). Uses `verdict` and `measure`,
//! never `output`: nothing here touches the file system.

pub mod chart;
mod csv_row;
pub mod data_files;
pub mod fleet_plots;
pub mod html;
pub mod junit;
pub mod plots;
pub mod requests_csv;
pub mod run_inputs;
pub mod run_page;
pub mod table;
pub mod timeline;
