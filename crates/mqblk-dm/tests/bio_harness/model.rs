//! The model: the device as one array of bytes, where an `error` line
//! fails what touches it and a `zero` line reads zeros and drops writes.

use mqblk_core::{Context, Device, Op, Status};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::submit::{run, Io, Outcome};
use super::table::Role;

/// The device as a plain array of bytes, and what each range does.
pub struct Model {
    pub data: Vec<u8>,
    pub roles: Vec<(u64, u64, Role)>,
}

impl Model {
    pub fn new(roles: &[(u64, u64, Role)]) -> Model {
        let sectors = roles.last().map_or(0, |r| r.1);
        Model {
            data: vec![0; sectors as usize * 512],
            roles: roles.to_vec(),
        }
    }

    pub fn touches(&self, io: &Io, role: Role) -> bool {
        self.roles
            .iter()
            .any(|&(s, e, r)| r == role && io.sector < e && s < io.sector + io.sectors)
    }

    pub fn status(&self, io: &Io) -> Status {
        if io.op != Op::Flush && self.touches(io, Role::Error) {
            Status::IoError
        } else {
            Status::Ok
        }
    }

    /// Apply a bio: its pieces on data lines land even when another piece
    /// failed on an error line (each clone ends on its own, as in Linux).
    pub fn apply(&mut self, io: &Io) {
        let data = match io.op {
            Op::Write => io.data(),
            Op::Discard | Op::WriteZeroes => vec![0; io.sectors as usize * 512],
            _ => return,
        };
        let (start, _) = io.range();
        for &(s, e, r) in &self.roles {
            if r != Role::Data {
                continue;
            }
            let lo = (s * 512).max(start as u64) as usize;
            let hi = (e * 512).min(start as u64 + data.len() as u64) as usize;
            if lo < hi {
                self.data[lo..hi].copy_from_slice(&data[lo - start..hi - start]);
            }
        }
    }

    /// Check each bio's outcome, in order, and apply it.
    pub fn check(&mut self, ios: &[Io], got: &[Outcome]) -> std::result::Result<(), TestCaseError> {
        for (i, (io, o)) in ios.iter().zip(got).enumerate() {
            prop_assert_eq!(o.status, self.status(io), "bio {} {:?}", i, io);
            if let Some(d) = &o.data {
                let (s, e) = io.range();
                prop_assert!(
                    d[..] == self.data[s..e],
                    "bio {} {:?} read other data",
                    i,
                    io
                );
            }
            self.apply(io);
        }
        Ok(())
    }

    /// Every range that reads, in one read each.
    pub fn readable(&self) -> impl Iterator<Item = Io> + '_ {
        self.roles
            .iter()
            .filter(|r| r.2 != Role::Error)
            .map(|&(s, e, _)| Io::read(s, e - s))
    }
}

/// Read back every range that reads, in one bio each.
pub fn read_all(
    ctx: &mut Context,
    model: &Model,
) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    let ios: Vec<Io> = model.readable().collect();
    run(ctx, &ios, 1)
}

/// Run `ios` on `dev` against the model of `roles`, then read it all back.
pub fn check_device(
    dev: &Device,
    roles: &[(u64, u64, Role)],
    ios: &[Io],
    batch: usize,
) -> std::result::Result<Model, TestCaseError> {
    let mut model = Model::new(roles);
    prop_assert_eq!(dev.capacity_bytes(), model.data.len() as u64);
    let mut ctx = dev.context().unwrap();
    let got = run(&mut ctx, ios, batch)?;
    model.check(ios, &got)?;
    let all: Vec<Io> = model.readable().collect();
    let back = read_all(&mut ctx, &model)?;
    model.check(&all, &back)?;
    Ok(model)
}
