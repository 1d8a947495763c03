//! fio's `random_generator=`: its names, and what mqblk draws for each
//! (mqblk-bench's `random_map` keeps fio's coverage).

/// fio's `random_generator=`: its names, and the generator mqblk draws
/// with for each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RandomGenerator {
    /// `tausworthe` (fio's default): mqblk's xorshift64*, with the map.
    #[default]
    Tausworthe,
    /// `tausworthe64`: xorshift64* (64 bits wide already), with the map.
    Tausworthe64,
    /// `lfsr`: fio's LFSR visits every block once per pass without a map;
    /// mqblk gives the same coverage with xorshift64* and the map, whatever
    /// `norandommap` says.
    Lfsr,
}

impl RandomGenerator {
    /// fio's spelling.
    pub fn parse(s: &str) -> Option<RandomGenerator> {
        Some(match s.trim() {
            "tausworthe" => RandomGenerator::Tausworthe,
            "tausworthe64" => RandomGenerator::Tausworthe64,
            "lfsr" => RandomGenerator::Lfsr,
            _ => return None,
        })
    }

    /// What a job file is told of the generator it asked for.
    pub fn note(self) -> &'static str {
        match self {
            RandomGenerator::Tausworthe | RandomGenerator::Tausworthe64 => {
                "offsets are drawn with xorshift64* (the random map keeps fio's coverage)"
            }
            RandomGenerator::Lfsr => {
                "offsets are drawn with xorshift64* and the random map, which visits every \
                 block once per pass as fio's lfsr does (norandommap does not apply)"
            }
        }
    }
}
