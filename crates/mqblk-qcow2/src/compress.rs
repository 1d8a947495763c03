//! Compressed clusters: raw deflate (as QEMU writes it, zlib's stream
//! without its header, a 4 KiB window) through `flate2`, and Zstandard
//! frames through `zstd`. Read only: a write to a compressed cluster
//! reallocates it uncompressed. Pure: no I/O.

use std::io::Read;

use crate::header::Compression;

/// Decompress `input` (the sectors of one compressed cluster, which may
/// run past the compressed stream) into `out`, exactly one cluster.
pub fn decompress(kind: Compression, input: &[u8], out: &mut [u8]) -> Result<(), String> {
    match kind {
        Compression::Deflate => flate2::read::DeflateDecoder::new(input)
            .read_exact(out)
            .map_err(|e| format!("deflate: {e}")),
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| format!("zstd: {e}"))?
                .single_frame();
            d.read_exact(out).map_err(|e| format!("zstd: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn deflate_round_trips_and_short_data_is_refused() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&data).unwrap();
        let mut z = e.finish().unwrap();
        // Padding to a sector, as in the image.
        z.resize(z.len().next_multiple_of(512), 0);
        let mut out = vec![0u8; 4096];
        decompress(Compression::Deflate, &z, &mut out).unwrap();
        assert_eq!(out, data);
        let mut big = vec![0u8; 8192];
        assert!(decompress(Compression::Deflate, &z, &mut big).is_err());
    }
}
