//! I/O priority (Linux `ioprio`): a class and a level within it, carried
//! by every request of a context so that schedulers can honour it.

/// A priority class, served in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoPrioClass {
    /// Real time: served before anything else.
    Rt = 0,
    /// Best effort: the default.
    #[default]
    Be = 1,
    /// Idle: served only when nothing else waits.
    Idle = 2,
}

impl IoPrioClass {
    /// Every class, highest first.
    pub const ALL: [IoPrioClass; 3] = [IoPrioClass::Rt, IoPrioClass::Be, IoPrioClass::Idle];

    /// Parse `rt`, `be` or `idle`, or fio's `prioclass` numbers 1, 2 and 3.
    pub fn parse(s: &str) -> Option<IoPrioClass> {
        match s {
            "rt" | "1" => Some(IoPrioClass::Rt),
            "be" | "2" => Some(IoPrioClass::Be),
            "idle" | "3" => Some(IoPrioClass::Idle),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            IoPrioClass::Rt => "rt",
            IoPrioClass::Be => "be",
            IoPrioClass::Idle => "idle",
        }
    }
}

/// A priority: a class and a level from 0 (highest) to 7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoPrio {
    /// The class.
    pub class: IoPrioClass,
    /// The level within the class, 0 to 7.
    pub level: u8,
}

impl Default for IoPrio {
    /// Best effort, level 4 (Linux's default for a task of nice 0).
    fn default() -> Self {
        IoPrio {
            class: IoPrioClass::Be,
            level: 4,
        }
    }
}
