//! Renderings of sandglass results for people and scripts.
//!
//! Each result kind has its own module; renderers write to any `std::io::Write` and never
//! decide what to measure. [`render::Render`] is each result's text and Markdown, and
//! [`render::stored`] renders a stored result by its run's kind.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod causes;
pub mod check;
pub mod compare;
pub mod export;
pub mod hourglass;
pub mod html;
pub mod load;
pub mod markdown;
pub mod merge;
pub mod microbench;
pub mod noise;
pub mod render;
pub mod study;
pub mod svg;
pub mod text;
pub mod timer;
