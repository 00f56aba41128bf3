//! Renderings of the analyses of `sandglass analyze`.
