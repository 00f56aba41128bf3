//! A reader of the kernel's per-CPU trace ring buffer in its binary form, as
//! `per_cpu/cpuN/trace_pipe_raw` hands it out, and a decoder of the events sandglass attributes
//! CPU time with.
//!
//! # Pages
//!
//! Each `read()` of `trace_pipe_raw` returns one sub-buffer ("page", 4096 bytes unless
//! `buffer_subbuf_size_kb` says otherwise). The kernel describes its header in
//! `events/header_page`; `kernel/trace/ring_buffer.c` (`struct buffer_data_page`) defines it as:
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 8 | `time_stamp`: the time, in the trace clock, that the records' deltas start from |
//! | 8 | `sizeof(long)` | `commit`: how many bytes of data the page holds, plus two flags |
//! | 16 | rest | the records, back to back |
//!
//! The low bits of `commit` count the bytes of records. Two flags sit above them, set by
//! `ring_buffer_read_page()` when it hands a page to a reader: bit 31 (`RB_MISSED_EVENTS`) says
//! events were lost (overwritten or dropped) between the previous page read and this one, and
//! bit 30 (`RB_MISSED_STORED`) says the number lost was also written, as an `unsigned long`,
//! right after the last record (the kernel only does so when that number fits in the page).
//! On 64-bit kernels `commit` is a `long` and the flags are added as a C `int`, so bit 31 is
//! sign-extended: a page that lost events has a `commit` such as `0xffffffff_c0000fdc` (seen on
//! Linux 6.18). Only the low 32 bits mean anything; the length is their low 30 bits.
//!
//! # Records
//!
//! `include/linux/ring_buffer.h` (`struct ring_buffer_event`) and `events/header_event` describe
//! a record: a 32-bit word holding a 5-bit `type_len` (the low bits on a little-endian machine)
//! and a 27-bit `time_delta` (the high bits), followed by 32-bit words `array[]`. `type_len`
//! (`enum ring_buffer_type`) says what the record is:
//!
//! - 1 to 28: a data record of `type_len * 4` bytes, starting at `array[0]`;
//! - 0: a data record too long for that: `array[0]` holds its length counting `array[0]`
//!   itself, and the data starts at `array[1]`; the whole record is `4 + array[0]` bytes;
//! - 29, padding: a discarded event or the unused end of a page, `4 + array[0]` bytes long;
//!   with a `time_delta` of zero it marks the rest of the page as unused;
//! - 30, time extend: a delta too large for 27 bits: `(array[0] << 27) + time_delta` is added to
//!   the running time; 8 bytes;
//! - 31, absolute time stamp: `(array[0] << 27) + time_delta` replaces the running time (the top
//!   5 bits of a 64-bit time do not fit and are taken from the running time); 8 bytes.
//!
//! The time of a data record is the page's `time_stamp` plus every delta before it on the page
//! (time extends included) plus its own `time_delta`, which is how `rb_update_read_stamp()`
//! in `ring_buffer.c` advances its own reader. Padding does not move the time.
//!
//! A data record is an event as its `events/SYSTEM/NAME/format` file lays it out: it starts with
//! the common fields (`common_type`, the event id, at offset 0, then flags, preempt count and
//! pid) and goes on with the event's own fields, at the offsets the format gives. Strings are
//! either fixed arrays (`char comm[16]`, NUL-terminated when shorter), arrays that run to the end
//! of the record (`char buf[]`), or `__data_loc` fields: a 32-bit word whose low 16 bits are the
//! offset of the bytes in the record and high 16 bits their length.
//!
//! Everything here is read little-endian, the byte order of x86-64 and aarch64. The code is
//! written from the kernel's description of the layout, not taken from another reader.

use std::collections::HashMap;

/// One kernel event on a CPU, at a CLOCK_MONOTONIC time in ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    pub ts_ns: u64,
    pub cpu: usize,
    /// The task current when the event was recorded (the record's `common_pid`; in an
    /// interrupt, the task it interrupted), when known.
    pub pid: Option<i32>,
    pub event: Event,
}

/// Why an event's `format` file, `events/header_page`, a page of `trace_pipe_raw` or a record
/// could not be read. Each message names what is malformed and where; a kernel that lays its
/// events out in a way this reader does not know gives these, and `--trace` then counts the
/// records as undecoded (or, for a format file, fails to start).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A `field:` line's `offset:` is not a number.
    #[error("bad offset `{0}`")]
    BadOffset(String),
    /// A `field:` line's `size:` is not a number.
    #[error("bad size `{0}`")]
    BadSize(String),
    /// A `field:` line with no declaration.
    #[error("no declaration")]
    NoDeclaration,
    /// A `field:` line with no `offset:`.
    #[error("`{decl}` has no offset")]
    NoOffset { decl: String },
    /// A `field:` line with no `size:`.
    #[error("`{decl}` has no size")]
    NoSize { decl: String },
    /// A malformed `field:` line of a `format` file.
    #[error("line {line}: {source}")]
    Line {
        line: usize,
        #[source]
        source: Box<DecodeError>,
    },
    /// An `ID:` line that is not a 16-bit event id.
    #[error("line {line}: bad event id `{value}`")]
    BadEventId { line: usize, value: String },
    /// A `field:` declaration that names no field.
    #[error("line {line}: no field name in `{decl}`")]
    NoFieldName { line: usize, decl: String },
    /// A `format` file with no `name:` line.
    #[error("no `name:` line")]
    NoName,
    /// A `format` file with no `ID:` line.
    #[error("{system}:{event}: no `ID:` line")]
    NoEventId { system: String, event: String },
    /// A `format` file with no `field:` line.
    #[error("{system}:{event}: no fields")]
    NoFields { system: String, event: String },
    /// `events/header_page` puts the page's time stamp elsewhere than a u64 at offset 0.
    #[error("the page time stamp is {size} bytes at offset {offset}, not 8 at 0")]
    TimeStampLayout { offset: usize, size: usize },
    /// `events/header_page` lacks the `commit` or `data` field.
    #[error("no `{0}` field")]
    NoHeaderField(&'static str),
    /// `events/header_page` gives `commit` a size that is not a C `long`.
    #[error("`commit` is {0} bytes, not 4 or 8")]
    CommitSize(usize),
    /// `events/header_page` puts `data` inside the page header.
    #[error("`data` at offset {0} overlaps the header")]
    DataOverlap(usize),
    /// A page shorter than its time stamp.
    #[error("page of {len} bytes is too short for its 8-byte time stamp")]
    NoTimeStamp { len: usize },
    /// A page shorter than its commit word.
    #[error("page of {len} bytes has no {size}-byte commit word at byte offset {offset}")]
    NoCommit {
        len: usize,
        size: usize,
        offset: usize,
    },
    /// A commit word that counts more data than the page holds.
    #[error(
        "commit length {length} (commit word {commit:#x} at byte offset {commit_offset}) runs \
         past the end of the {len}-byte page (data starts at byte offset {data_offset})"
    )]
    CommitPastEnd {
        length: usize,
        commit: u64,
        commit_offset: usize,
        len: usize,
        data_offset: usize,
    },
    /// A stored count of missed events that does not fit in the page.
    #[error(
        "the commit word flags a stored count of missed events, but its {size} bytes at byte \
         offset {offset} run past the end of the {len}-byte page"
    )]
    MissedCountPastEnd {
        size: usize,
        offset: usize,
        len: usize,
    },
    /// A record header or length word cut off by the end of the page's data.
    #[error("truncated {what} at byte offset {offset}: the page's data ends at {end}")]
    Truncated {
        what: &'static str,
        offset: usize,
        end: usize,
    },
    /// A long record (type_len 0) whose length word is less than its own size.
    #[error(
        "long record at byte offset {offset} gives a length of {len}, less than its own length \
         word"
    )]
    LongRecordLength { offset: usize, len: u32 },
    /// A record that runs past the end of the page's data.
    #[error(
        "record of type_len {type_len} at byte offset {offset} is {size} bytes long and runs \
         past the end of the page's data at {end}"
    )]
    RecordPastEnd {
        type_len: u32,
        offset: usize,
        size: usize,
        end: usize,
    },
    /// The format of an event the decoder knows lacks a field it needs (a kernel that renamed
    /// it).
    #[error("the format of {system}:{event} has no field `{field}`")]
    MissingField {
        system: String,
        event: String,
        field: &'static str,
    },
    /// An integer field of a size that is not 1 to 8 bytes.
    #[error("field `{field}` is {size} bytes long, not an integer")]
    NotInteger { field: &'static str, size: usize },
    /// A record too short for one of its fields.
    #[error(
        "the {len}-byte record is too short for field `{field}` ({size} bytes at offset {offset})"
    )]
    FieldPastEnd {
        len: usize,
        field: &'static str,
        size: usize,
        offset: usize,
    },
    /// A `__data_loc` field that is not a 32-bit word.
    #[error("__data_loc field `{field}` is {size} bytes long, not 4")]
    DataLocSize { field: &'static str, size: usize },
    /// A `__data_loc` field that points out of its record.
    #[error(
        "__data_loc field `{field}` points at {size} bytes at offset {offset}, past the end of \
         the {len}-byte record"
    )]
    DataLocPastEnd {
        field: &'static str,
        size: usize,
        offset: usize,
        len: usize,
    },
    /// A record too short for its event id.
    #[error("a {len}-byte record has no event id")]
    NoRecordId { len: usize },
    /// A record of a known event that could not be decoded.
    #[error("{event} (id {id}): {source}")]
    Record {
        event: String,
        id: u16,
        #[source]
        source: Box<DecodeError>,
    },
}

/// One field of an event's `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name (`prev_comm`, `irq`, `buf`...).
    pub name: String,
    /// Its offset from the start of the record (the `common_type` field).
    pub offset: usize,
    /// Its size in bytes; 0 for an array that runs to the end of the record (`char buf[]`).
    pub size: usize,
    /// Whether the kernel declares it signed.
    pub signed: bool,
    /// `__data_loc` field: a u32 whose low 16 bits are the offset of the data in the record and
    /// high 16 bits its length. (`__rel_loc` fields, whose offset counts from the end of the
    /// field, are not told apart: none of the events decoded here has one.)
    pub data_loc: bool,
}

/// An event's layout, from its `events/SYSTEM/NAME/format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    /// The event's system (`sched`, `irq`...), as given to [`parse_format`].
    pub system: String,
    /// The event's name (`sched_switch`...).
    pub name: String,
    /// The event id, the value of `common_type` in its records.
    pub id: u16,
    /// The fields, common ones included, in the file's order.
    pub fields: Vec<Field>,
}

impl Format {
    /// The field called `name`, if the event has one.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Reads the `key:value;` attributes of a `field:` line of a `format` or `header_page` file into
/// (declaration, offset, size, signed).
fn parse_field_line(line: &str) -> Result<(String, usize, usize, bool), DecodeError> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let Some((key, value)) = part.trim().split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "offset" => {
                offset = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| DecodeError::BadOffset(value.to_string()))?,
                )
            }
            "size" => {
                size = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| DecodeError::BadSize(value.to_string()))?,
                )
            }
            "signed" => signed = value != "0",
            k if k.starts_with("field") => decl = Some(value.to_string()),
            _ => {}
        }
    }
    let decl = decl.ok_or(DecodeError::NoDeclaration)?;
    let Some(offset) = offset else {
        return Err(DecodeError::NoOffset { decl });
    };
    let Some(size) = size else {
        return Err(DecodeError::NoSize { decl });
    };
    Ok((decl, offset, size, signed))
}

/// The name declared by a C declaration such as `unsigned short common_type`, `char comm[16]`,
/// `void * function`, `char buf[]` or `__data_loc char[] name`.
fn declared_name(decl: &str) -> Option<&str> {
    let mut d = decl.trim();
    if d.ends_with(']') {
        d = d[..d.rfind('[')?].trim_end();
    }
    let name = d.rsplit(|c: char| c.is_whitespace() || c == '*').next()?;
    // A type must come before the name.
    let ident = d.len() > name.len()
        && !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then_some(name)
}

/// Parses the text of `events/SYSTEM/NAME/format`.
///
/// Reads the `name:` and `ID:` lines and every `field:` line (declaration, `offset`, `size`,
/// `signed`); the print format is ignored. Errs when the name, the id or any field is missing or
/// unreadable.
pub fn parse_format(system: &str, text: &str) -> Result<Format, DecodeError> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("name:") {
            name = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("ID:") {
            let v = v.trim();
            id = Some(v.parse::<u16>().map_err(|_| DecodeError::BadEventId {
                line: i + 1,
                value: v.to_string(),
            })?);
        } else if line.starts_with("field") {
            let (decl, offset, size, signed) =
                parse_field_line(line).map_err(|e| DecodeError::Line {
                    line: i + 1,
                    source: Box::new(e),
                })?;
            let Some(fname) = declared_name(&decl) else {
                return Err(DecodeError::NoFieldName { line: i + 1, decl });
            };
            fields.push(Field {
                name: fname.to_string(),
                offset,
                size,
                signed,
                data_loc: decl.starts_with("__data_loc"),
            });
        }
    }
    let name = name.ok_or(DecodeError::NoName)?;
    let Some(id) = id else {
        return Err(DecodeError::NoEventId {
            system: system.to_string(),
            event: name,
        });
    };
    if fields.is_empty() {
        return Err(DecodeError::NoFields {
            system: system.to_string(),
            event: name,
        });
    }
    Ok(Format {
        system: system.to_string(),
        name,
        id,
        fields,
    })
}

/// Layout of a buffer page, from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLayout {
    /// Offset of the `commit` word (8).
    pub commit_offset: usize,
    /// Size of the `commit` word: `sizeof(long)`, 8 on 64-bit kernels, 4 on 32-bit ones.
    pub commit_size: usize,
    /// Offset of the first record (16 on 64-bit kernels).
    pub data_offset: usize,
}

/// Parses the text of `events/header_page`: the offsets and sizes of the page's `commit` word
/// and `data`. The page's time stamp must be a u64 at offset 0, as on every kernel so far.
pub fn parse_header_page(text: &str) -> Result<PageLayout, DecodeError> {
    let mut commit = None;
    let mut data = None;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with("field") {
            continue;
        }
        let (decl, offset, size, _) = parse_field_line(line)?;
        match declared_name(&decl) {
            Some("timestamp") if (offset, size) != (0, 8) => {
                return Err(DecodeError::TimeStampLayout { offset, size })
            }
            Some("commit") => commit = Some((offset, size)),
            Some("data") => data = Some(offset),
            _ => {}
        }
    }
    let (commit_offset, commit_size) = commit.ok_or(DecodeError::NoHeaderField("commit"))?;
    if commit_size != 4 && commit_size != 8 {
        return Err(DecodeError::CommitSize(commit_size));
    }
    let data_offset = data.ok_or(DecodeError::NoHeaderField("data"))?;
    if data_offset < 8 || data_offset < commit_offset.saturating_add(commit_size) {
        return Err(DecodeError::DataOverlap(data_offset));
    }
    Ok(PageLayout {
        commit_offset,
        commit_size,
        data_offset,
    })
}

/// What one page held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageInfo {
    /// Data records (events) on the page.
    pub events: u64,
    /// the kernel flagged events lost before this page (RB_MISSED_EVENTS, bit 31 of commit)
    pub missed_before: bool,
    /// how many were lost, when the kernel stored the count after the data (RB_MISSED_STORED,
    /// bit 30)
    pub missed_count: Option<u64>,
}

/// `commit` flag: events were lost before this page.
const RB_MISSED_EVENTS: u64 = 1 << 31;
/// `commit` flag: the number lost is stored after the last record.
const RB_MISSED_STORED: u64 = 1 << 30;
/// The bits of `commit` that count bytes.
const COMMIT_LENGTH: u64 = RB_MISSED_STORED - 1;

/// The largest `type_len` of a data record.
const TYPE_DATA_MAX: u32 = 28;
/// `type_len` of padding.
const TYPE_PADDING: u32 = 29;
/// `type_len` of a time extend (31, the largest, is an absolute time stamp).
const TYPE_TIME_EXTEND: u32 = 30;
/// Bits of `time_delta` in a record header.
const DELTA_BITS: u32 = 27;
/// The top bits of a time that an absolute time stamp record cannot hold: it has 27 + 32 bits.
const ABS_TS_LOST: u64 = !((1 << 59) - 1);

/// Reads a little-endian unsigned integer of `size` (1 to 8) bytes at `offset`, if it fits.
fn read_uint(buf: &[u8], offset: usize, size: usize) -> Option<u64> {
    if size == 0 || size > 8 {
        return None;
    }
    let bytes = buf.get(offset..offset.checked_add(size)?)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)),
    )
}

/// Reads the u32 at `off` in a page, or says where the page ends too soon.
fn page_u32(page: &[u8], off: usize, end: usize, what: &'static str) -> Result<u32, DecodeError> {
    let truncated = DecodeError::Truncated {
        what,
        offset: off,
        end,
    };
    if !matches!(off.checked_add(4), Some(e) if e <= end) {
        return Err(truncated);
    }
    read_uint(page, off, 4).map(|v| v as u32).ok_or(truncated)
}

/// Walks one page (as returned by one `read()` of `trace_pipe_raw`, normally 4096 bytes),
/// calling `f(timestamp_ns, record)` for every data event, where `record` starts at the event's
/// `common_type` field. Handles `type_len` 0 (length in `array[0]`), 1..=28 (length
/// `type_len * 4`), 29 padding, 30 time extend, 31 absolute time stamp. Never panics on any
/// input: a malformed page gives Err naming what is wrong (and the byte offset).
///
/// The time stamps are in the instance's trace clock (nanoseconds of CLOCK_MONOTONIC with
/// `trace_clock` set to `mono`). A `record` of a short event (type_len 1 to 28) is a multiple of
/// 4 bytes long and may end with alignment padding after the event's last field. Events passed
/// to `f` before an error are not taken back.
pub fn parse_page(
    page: &[u8],
    layout: &PageLayout,
    f: &mut dyn FnMut(u64, &[u8]),
) -> Result<PageInfo, DecodeError> {
    let mut ts = read_uint(page, 0, 8).ok_or(DecodeError::NoTimeStamp { len: page.len() })?;
    let commit =
        read_uint(page, layout.commit_offset, layout.commit_size).ok_or(DecodeError::NoCommit {
            len: page.len(),
            size: layout.commit_size,
            offset: layout.commit_offset,
        })?;
    let length = (commit & COMMIT_LENGTH) as usize;
    let end = layout
        .data_offset
        .checked_add(length)
        .filter(|&e| e <= page.len())
        .ok_or(DecodeError::CommitPastEnd {
            length,
            commit,
            commit_offset: layout.commit_offset,
            len: page.len(),
            data_offset: layout.data_offset,
        })?;
    let mut info = PageInfo {
        events: 0,
        missed_before: commit & RB_MISSED_EVENTS != 0,
        missed_count: None,
    };
    if commit & RB_MISSED_STORED != 0 {
        // The count is an `unsigned long`, the size of `commit` itself.
        info.missed_count = Some(read_uint(page, end, layout.commit_size).ok_or(
            DecodeError::MissedCountPastEnd {
                size: layout.commit_size,
                offset: end,
                len: page.len(),
            },
        )?);
    }
    let mut off = layout.data_offset;
    while off < end {
        let header = page_u32(page, off, end, "record header")?;
        let type_len = header & 0x1f;
        let delta = u64::from(header >> 5);
        // Total bytes of the record, and where its data starts if it is a data record.
        let (size, data_start) = match type_len {
            0 => {
                let len = page_u32(page, off + 4, end, "length of a long record")?;
                if len < 4 {
                    return Err(DecodeError::LongRecordLength { offset: off, len });
                }
                ((len as usize).saturating_add(4), Some(8))
            }
            1..=TYPE_DATA_MAX => (4 + 4 * type_len as usize, Some(4)),
            TYPE_PADDING if delta == 0 => break, // the rest of the page is unused
            TYPE_PADDING => {
                let len = page_u32(page, off + 4, end, "length of a padding record")?;
                ((len as usize).saturating_add(4), None)
            }
            _ => {
                // A time extend or an absolute time stamp (type_len has 5 bits).
                let high = page_u32(page, off + 4, end, "time record")?;
                let value = (u64::from(high) << DELTA_BITS) | delta;
                if type_len == TYPE_TIME_EXTEND {
                    ts = ts.wrapping_add(value);
                } else {
                    // An absolute time stamp. Recover the top bits the record could not hold
                    // from the running time, and a carry into them if the low bits wrapped.
                    let top = ts & ABS_TS_LOST;
                    let mut abs = value | top;
                    if top != 0 && abs < ts {
                        abs = abs.wrapping_add(1 << 59);
                    }
                    ts = abs;
                }
                (8, None)
            }
        };
        let next =
            off.checked_add(size)
                .filter(|&n| n <= end)
                .ok_or(DecodeError::RecordPastEnd {
                    type_len,
                    offset: off,
                    size,
                    end,
                })?;
        if let Some(start) = data_start {
            ts = ts.wrapping_add(delta);
            info.events += 1;
            if let Some(record) = page.get(off + start..next) {
                f(ts, record);
            }
        }
        off = next;
    }
    Ok(info)
}

/// The events sandglass attributes time with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// sched:sched_switch
    Switch {
        prev_pid: i32,
        prev_comm: String,
        /// The kernel priority of the task switched out (0-99: real-time, 99 minus its
        /// rt_priority; 100-139: normal, 120 plus its nice; -1: SCHED_DEADLINE).
        prev_prio: i32,
        /// The task state bits of the task switched out (0: runnable, preempted).
        prev_state: i64,
        next_pid: i32,
        next_comm: String,
        next_prio: i32,
    },
    /// sched:sched_waking and sched:sched_wakeup (`waking` true for the former)
    Wakeup {
        waking: bool,
        pid: i32,
        comm: String,
        /// The CPU the task is to run on; -1 if the kernel's format has no `target_cpu`.
        target_cpu: i32,
    },
    /// irq:irq_handler_entry
    IrqEntry { irq: i32, name: String },
    /// irq:irq_handler_exit
    IrqExit { irq: i32 },
    /// irq:softirq_entry (vec: 0 HI,1 TIMER,2 NET_TX,3 NET_RX,4 BLOCK,5 IRQ_POLL,6 TASKLET,
    /// 7 SCHED,8 HRTIMER,9 RCU)
    SoftirqEntry { vec: u32 },
    /// irq:softirq_exit
    SoftirqExit { vec: u32 },
    /// irq:softirq_raise: the vector is marked pending (it runs at the next interrupt exit or
    /// in ksoftirqd)
    SoftirqRaise { vec: u32 },
    /// irq_vectors:*_entry (x86 system vectors: local_timer, reschedule, call_function,
    /// call_function_single, irq_work, thermal_apic, threshold_apic, deferred_error_apic,
    /// error_apic, spurious_apic, x86_platform_ipi, ...). `name` is the event name without
    /// `_entry`/`_exit`.
    VectorEntry { name: String, vector: i32 },
    /// irq_vectors:*_exit
    VectorExit { name: String, vector: i32 },
    /// nmi:nmi_handler (one event at the end of each NMI handler, with its duration)
    Nmi { handler: u64, delta_ns: i64 },
    /// timer:hrtimer_start: a timer armed to expire at `softexpires_ns` (at the latest
    /// `expires_ns`, the two differ by the task's timer slack), CLOCK_MONOTONIC for the
    /// timers of clock_nanosleep and timerfd on that clock; `hrtimer` and `function` are
    /// kernel addresses
    HrtimerStart {
        hrtimer: u64,
        function: u64,
        expires_ns: i64,
        softexpires_ns: i64,
    },
    /// timer:hrtimer_expire_entry: the timer's callback starts; `now_ns` is the time the
    /// interrupt read its clock base (0 when the format has no `now`); `hrtimer` and
    /// `function` are kernel addresses
    HrtimerEntry {
        hrtimer: u64,
        function: u64,
        now_ns: i64,
    },
    /// timer:hrtimer_expire_exit
    HrtimerExit,
    /// workqueue:workqueue_execute_start; `function` is the address as u64
    WorkStart { function: u64 },
    /// workqueue:workqueue_execute_end; `function` is the address as u64 (0 on kernels whose
    /// event does not record it)
    WorkEnd { function: u64 },
    /// ftrace:print (trace_marker writes): the text written, without the newline the kernel
    /// appends to a write that does not end with one
    Marker { text: String },
    /// any other event id
    Other { id: u16 },
}

/// Where a field is in a record: the part of [`Field`] the decoder needs.
#[derive(Clone, Copy, Debug)]
struct Slot {
    name: &'static str,
    offset: usize,
    size: usize,
    signed: bool,
    data_loc: bool,
}

/// How to decode the records of one event id.
#[derive(Clone, Debug)]
enum Kind {
    Switch {
        prev_pid: Slot,
        prev_comm: Slot,
        prev_prio: Slot,
        prev_state: Slot,
        next_pid: Slot,
        next_comm: Slot,
        next_prio: Slot,
    },
    Wakeup {
        waking: bool,
        pid: Slot,
        comm: Slot,
        target_cpu: Option<Slot>,
    },
    IrqEntry {
        irq: Slot,
        name: Slot,
    },
    IrqExit {
        irq: Slot,
    },
    Softirq {
        entry: bool,
        vec: Slot,
    },
    SoftirqRaise {
        vec: Slot,
    },
    Vector {
        entry: bool,
        name: String,
        vector: Slot,
    },
    Nmi {
        handler: Slot,
        delta_ns: Slot,
    },
    HrtimerStart {
        hrtimer: Slot,
        function: Slot,
        expires: Slot,
        softexpires: Slot,
    },
    HrtimerEntry {
        hrtimer: Slot,
        function: Slot,
        now: Option<Slot>,
    },
    HrtimerExit,
    WorkStart {
        function: Slot,
    },
    WorkEnd {
        function: Option<Slot>,
    },
    Marker {
        buf: Slot,
    },
    /// A known event whose format lacks a field the decoder needs: decoding it errs with this.
    Unusable(DecodeError),
}

/// Maps event ids to decoders, built from the formats of the events that were enabled.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    /// Per event id: `system:name` (for error messages) and how to decode it.
    kinds: HashMap<u16, (String, Kind)>,
}

/// The [`Slot`] of field `name` of `format`, if it has one.
fn slot(format: &Format, name: &'static str) -> Option<Slot> {
    format.field(name).map(|f| Slot {
        name,
        offset: f.offset,
        size: f.size,
        signed: f.signed,
        data_loc: f.data_loc,
    })
}

/// The [`Slot`] of field `name` of `format`, or an error naming the missing field.
fn need(format: &Format, name: &'static str) -> Result<Slot, DecodeError> {
    slot(format, name).ok_or_else(|| DecodeError::MissingField {
        system: format.system.clone(),
        event: format.name.clone(),
        field: name,
    })
}

/// How to decode `format`'s records: None for an event the decoder does not know, an error for
/// a known event whose format lacks a field.
fn kind_of(format: &Format) -> Result<Option<Kind>, DecodeError> {
    let f = format;
    let kind = match (f.system.as_str(), f.name.as_str()) {
        ("sched", "sched_switch") => Kind::Switch {
            prev_pid: need(f, "prev_pid")?,
            prev_comm: need(f, "prev_comm")?,
            prev_prio: need(f, "prev_prio")?,
            prev_state: need(f, "prev_state")?,
            next_pid: need(f, "next_pid")?,
            next_comm: need(f, "next_comm")?,
            next_prio: need(f, "next_prio")?,
        },
        ("sched", n @ ("sched_waking" | "sched_wakeup")) => Kind::Wakeup {
            waking: n == "sched_waking",
            pid: need(f, "pid")?,
            comm: need(f, "comm")?,
            target_cpu: slot(f, "target_cpu"),
        },
        ("irq", "irq_handler_entry") => Kind::IrqEntry {
            irq: need(f, "irq")?,
            name: need(f, "name")?,
        },
        ("irq", "irq_handler_exit") => Kind::IrqExit {
            irq: need(f, "irq")?,
        },
        ("irq", n @ ("softirq_entry" | "softirq_exit")) => Kind::Softirq {
            entry: n == "softirq_entry",
            vec: need(f, "vec")?,
        },
        ("irq", "softirq_raise") => Kind::SoftirqRaise {
            vec: need(f, "vec")?,
        },
        ("irq_vectors", n) => {
            let (name, entry) = if let Some(base) = n.strip_suffix("_entry") {
                (base, true)
            } else if let Some(base) = n.strip_suffix("_exit") {
                (base, false)
            } else {
                return Ok(None);
            };
            Kind::Vector {
                entry,
                name: name.to_string(),
                vector: need(f, "vector")?,
            }
        }
        ("nmi", "nmi_handler") => Kind::Nmi {
            handler: need(f, "handler")?,
            delta_ns: need(f, "delta_ns")?,
        },
        ("timer", "hrtimer_start") => Kind::HrtimerStart {
            hrtimer: need(f, "hrtimer")?,
            function: need(f, "function")?,
            expires: need(f, "expires")?,
            softexpires: need(f, "softexpires")?,
        },
        ("timer", "hrtimer_expire_entry") => Kind::HrtimerEntry {
            hrtimer: need(f, "hrtimer")?,
            function: need(f, "function")?,
            now: slot(f, "now"),
        },
        ("timer", "hrtimer_expire_exit") => Kind::HrtimerExit,
        ("workqueue", "workqueue_execute_start") => Kind::WorkStart {
            function: need(f, "function")?,
        },
        ("workqueue", "workqueue_execute_end") => Kind::WorkEnd {
            function: slot(f, "function"),
        },
        ("ftrace", "print") => Kind::Marker {
            buf: need(f, "buf")?,
        },
        _ => return Ok(None),
    };
    Ok(Some(kind))
}

/// Reads the integer field `s` of `rec` as a u64, sign-extended when the field is signed.
fn int(rec: &[u8], s: Slot) -> Result<u64, DecodeError> {
    if s.size == 0 || s.size > 8 {
        return Err(DecodeError::NotInteger {
            field: s.name,
            size: s.size,
        });
    }
    let v = read_uint(rec, s.offset, s.size).ok_or_else(|| too_short(rec, s))?;
    let unused = 64 - 8 * s.size as u32;
    Ok(if s.signed {
        (((v << unused) as i64) >> unused) as u64
    } else {
        v
    })
}

/// The error for a field that does not fit in the record.
fn too_short(rec: &[u8], s: Slot) -> DecodeError {
    DecodeError::FieldPastEnd {
        len: rec.len(),
        field: s.name,
        size: s.size,
        offset: s.offset,
    }
}

/// Reads the string field `s` of `rec`: a fixed array (NUL-terminated when shorter), an array
/// to the end of the record (size 0), or a `__data_loc` field.
fn string(rec: &[u8], s: Slot) -> Result<String, DecodeError> {
    let bytes = if s.data_loc {
        if s.size != 4 {
            return Err(DecodeError::DataLocSize {
                field: s.name,
                size: s.size,
            });
        }
        let loc = read_uint(rec, s.offset, 4).ok_or_else(|| too_short(rec, s))?;
        let (start, len) = ((loc & 0xffff) as usize, (loc >> 16 & 0xffff) as usize);
        rec.get(start..start + len)
            .ok_or(DecodeError::DataLocPastEnd {
                field: s.name,
                size: len,
                offset: start,
                len: rec.len(),
            })?
    } else if s.size == 0 {
        rec.get(s.offset..).ok_or_else(|| too_short(rec, s))?
    } else {
        rec.get(s.offset..s.offset.saturating_add(s.size))
            .ok_or_else(|| too_short(rec, s))?
    };
    let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
    Ok(String::from_utf8_lossy(text).into_owned())
}

impl Decoder {
    /// A decoder of the events of `formats` that sandglass knows; the records of every other id
    /// decode to [`Event::Other`]. A known event whose format lacks a field the decoder needs
    /// (a kernel that renamed it) makes every one of its records an error. Of two formats with
    /// the same id, the later one is used.
    pub fn new(formats: &[Format]) -> Decoder {
        let mut kinds = HashMap::new();
        for format in formats {
            let kind = match kind_of(format) {
                Ok(Some(kind)) => kind,
                Ok(None) => continue,
                Err(why) => Kind::Unusable(why),
            };
            kinds.insert(
                format.id,
                (format!("{}:{}", format.system, format.name), kind),
            );
        }
        Decoder { kinds }
    }

    /// Decodes one record as passed to parse_page's callback. Never panics: a record too short
    /// for its format gives Err.
    ///
    /// Integer fields are read at the sizes their formats give (`prev_state` is a `long` on
    /// some kernels and an `unsigned int` on others) and converted to the variant's types.
    pub fn decode(&self, record: &[u8]) -> Result<Event, DecodeError> {
        let id =
            read_uint(record, 0, 2).ok_or(DecodeError::NoRecordId { len: record.len() })? as u16;
        let Some((what, kind)) = self.kinds.get(&id) else {
            return Ok(Event::Other { id });
        };
        decode_kind(record, kind).map_err(|e| DecodeError::Record {
            event: what.clone(),
            id,
            source: Box::new(e),
        })
    }
}

/// Decodes `rec`, a record of an event of kind `kind`.
fn decode_kind(rec: &[u8], kind: &Kind) -> Result<Event, DecodeError> {
    let i32_of = |s: Slot| int(rec, s).map(|v| v as i32);
    Ok(match kind {
        Kind::Switch {
            prev_pid,
            prev_comm,
            prev_prio,
            prev_state,
            next_pid,
            next_comm,
            next_prio,
        } => Event::Switch {
            prev_pid: i32_of(*prev_pid)?,
            prev_comm: string(rec, *prev_comm)?,
            prev_prio: i32_of(*prev_prio)?,
            prev_state: int(rec, *prev_state)? as i64,
            next_pid: i32_of(*next_pid)?,
            next_comm: string(rec, *next_comm)?,
            next_prio: i32_of(*next_prio)?,
        },
        Kind::Wakeup {
            waking,
            pid,
            comm,
            target_cpu,
        } => Event::Wakeup {
            waking: *waking,
            pid: i32_of(*pid)?,
            comm: string(rec, *comm)?,
            target_cpu: match target_cpu {
                Some(s) => i32_of(*s)?,
                None => -1,
            },
        },
        Kind::IrqEntry { irq, name } => Event::IrqEntry {
            irq: i32_of(*irq)?,
            name: string(rec, *name)?,
        },
        Kind::IrqExit { irq } => Event::IrqExit { irq: i32_of(*irq)? },
        Kind::Softirq { entry, vec } => {
            let vec = int(rec, *vec)? as u32;
            if *entry {
                Event::SoftirqEntry { vec }
            } else {
                Event::SoftirqExit { vec }
            }
        }
        Kind::SoftirqRaise { vec } => Event::SoftirqRaise {
            vec: int(rec, *vec)? as u32,
        },
        Kind::Vector {
            entry,
            name,
            vector,
        } => {
            let (name, vector) = (name.clone(), i32_of(*vector)?);
            if *entry {
                Event::VectorEntry { name, vector }
            } else {
                Event::VectorExit { name, vector }
            }
        }
        Kind::Nmi { handler, delta_ns } => Event::Nmi {
            handler: int(rec, *handler)?,
            delta_ns: int(rec, *delta_ns)? as i64,
        },
        Kind::HrtimerStart {
            hrtimer,
            function,
            expires,
            softexpires,
        } => Event::HrtimerStart {
            hrtimer: int(rec, *hrtimer)?,
            function: int(rec, *function)?,
            expires_ns: int(rec, *expires)? as i64,
            softexpires_ns: int(rec, *softexpires)? as i64,
        },
        Kind::HrtimerEntry {
            hrtimer,
            function,
            now,
        } => Event::HrtimerEntry {
            hrtimer: int(rec, *hrtimer)?,
            function: int(rec, *function)?,
            now_ns: match now {
                Some(s) => int(rec, *s)? as i64,
                None => 0,
            },
        },
        Kind::HrtimerExit => Event::HrtimerExit,
        Kind::WorkStart { function } => Event::WorkStart {
            function: int(rec, *function)?,
        },
        Kind::WorkEnd { function } => Event::WorkEnd {
            function: match function {
                Some(s) => int(rec, *s)?,
                None => 0,
            },
        },
        Kind::Marker { buf } => {
            let mut text = string(rec, *buf)?;
            if text.ends_with('\n') {
                text.pop();
            }
            Event::Marker { text }
        }
        Kind::Unusable(why) => return Err(why.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;

    /// The `format` files of this kernel (Linux 6.18, x86-64) under `fixtures/events/`, as
    /// (system, name, text).
    macro_rules! formats {
        ($(($system:literal, $name:literal)),* $(,)?) => {
            [$((
                $system,
                $name,
                include_str!(concat!("fixtures/events/", $system, "/", $name, "/format")),
            )),*]
        };
    }
    const FORMATS: [(&str, &str, &str); 19] = formats![
        ("sched", "sched_switch"),
        ("sched", "sched_waking"),
        ("sched", "sched_wakeup"),
        ("irq", "irq_handler_entry"),
        ("irq", "irq_handler_exit"),
        ("irq", "softirq_entry"),
        ("irq", "softirq_exit"),
        ("irq", "softirq_raise"),
        ("irq_vectors", "local_timer_entry"),
        ("irq_vectors", "local_timer_exit"),
        ("irq_vectors", "call_function_single_entry"),
        ("irq_vectors", "call_function_single_exit"),
        ("timer", "hrtimer_start"),
        ("timer", "hrtimer_expire_entry"),
        ("timer", "hrtimer_expire_exit"),
        ("workqueue", "workqueue_execute_start"),
        ("workqueue", "workqueue_execute_end"),
        ("nmi", "nmi_handler"),
        ("ftrace", "print"),
    ];

    const HEADER_PAGE: &str = include_str!("fixtures/header_page");
    /// Three pages read from `per_cpu/cpu1/trace_pipe_raw` of an instance recording the
    /// scheduler, interrupt, vector, timer and workqueue events during disk writes, with two
    /// trace_marker writes (the second too long for a short record).
    const BUSY_RAW: &[u8] = include_bytes!("fixtures/busy-cpu1.raw");
    /// `per_cpu/cpu1/trace` of the same instance, read just before the pages (gzipped).
    const BUSY_TEXT_GZ: &[u8] = include_bytes!("fixtures/busy-cpu1.trace.gz");
    /// One page of sched_switch events and markers 0.3 s apart: it holds time extends.
    const EXTEND_RAW: &[u8] = include_bytes!("fixtures/extend-cpu1.raw");
    const EXTEND_TEXT: &str = include_str!("fixtures/extend-cpu1.trace");
    /// The first page read after an 8 KiB buffer overflowed: 3004 markers written, the first
    /// 2825 overwritten. Marker i reads `overflow mark i ` and (i * 7) % 23 `x`s.
    const OVERFLOW_RAW: &[u8] = include_bytes!("fixtures/overflow-cpu1.raw");

    fn format_of(name: &str) -> Format {
        let (system, _, text) = FORMATS
            .iter()
            .find(|(_, n, _)| *n == name)
            .expect("a fixture format");
        parse_format(system, text).expect("a valid format")
    }

    fn all_formats() -> Vec<Format> {
        FORMATS
            .iter()
            .map(|(system, _, text)| parse_format(system, text).expect("a valid format"))
            .collect()
    }

    fn layout() -> PageLayout {
        parse_header_page(HEADER_PAGE).expect("a valid header_page")
    }

    fn field(name: &str, offset: usize, size: usize, signed: bool) -> Field {
        Field {
            name: name.to_string(),
            offset,
            size,
            signed,
            data_loc: false,
        }
    }

    fn common_fields() -> Vec<Field> {
        vec![
            field("common_type", 0, 2, false),
            field("common_flags", 2, 1, false),
            field("common_preempt_count", 3, 1, false),
            field("common_pid", 4, 4, true),
        ]
    }

    /// Records with their times, as parse_page passes them.
    type Records = Vec<(u64, Vec<u8>)>;

    /// Every event of every 4096-byte page of `raw`, with its page's info.
    fn walk(raw: &[u8]) -> (Vec<PageInfo>, Records) {
        let layout = layout();
        let mut events = Vec::new();
        let infos = raw
            .chunks(4096)
            .map(|page| {
                parse_page(page, &layout, &mut |ts, rec| {
                    events.push((ts, rec.to_vec()))
                })
                .expect("a valid page")
            })
            .collect();
        (infos, events)
    }

    // ---------------------------------------------------------------- formats

    #[test]
    fn parse_format_sched_switch() {
        let f = format_of("sched_switch");
        assert_eq!(
            (f.system.as_str(), f.name.as_str(), f.id),
            ("sched", "sched_switch", 372)
        );
        let mut expected = common_fields();
        expected.extend([
            field("prev_comm", 8, 16, false),
            field("prev_pid", 24, 4, true),
            field("prev_prio", 28, 4, true),
            // `long` on this kernel; `unsigned int` on some others.
            field("prev_state", 32, 8, true),
            field("next_comm", 40, 16, false),
            field("next_pid", 56, 4, true),
            field("next_prio", 60, 4, true),
        ]);
        assert_eq!(f.fields, expected);
        assert_eq!(f.field("next_pid"), Some(&field("next_pid", 56, 4, true)));
        assert_eq!(f.field("nope"), None);
    }

    #[test]
    fn parse_format_irq_handler_entry_data_loc() {
        let f = format_of("irq_handler_entry");
        assert_eq!(f.id, 225);
        assert_eq!(f.field("irq"), Some(&field("irq", 8, 4, true)));
        let name = Field {
            data_loc: true,
            ..field("name", 12, 4, false)
        };
        assert_eq!(f.field("name"), Some(&name));
        assert_eq!(f.fields.len(), 6);
    }

    #[test]
    fn parse_format_softirq_entry() {
        let f = format_of("softirq_entry");
        assert_eq!((f.system.as_str(), f.id), ("irq", 223));
        let mut expected = common_fields();
        expected.push(field("vec", 8, 4, false));
        assert_eq!(f.fields, expected);
    }

    #[test]
    fn parse_format_local_timer_entry() {
        let f = format_of("local_timer_entry");
        assert_eq!((f.system.as_str(), f.id), ("irq_vectors", 165));
        let mut expected = common_fields();
        expected.push(field("vector", 8, 4, true));
        assert_eq!(f.fields, expected);
    }

    #[test]
    fn parse_format_hrtimer_expire_entry() {
        let f = format_of("hrtimer_expire_entry");
        assert_eq!(f.id, 459);
        let mut expected = common_fields();
        expected.extend([
            field("hrtimer", 8, 8, false),
            field("now", 16, 8, true),
            field("function", 24, 8, false),
        ]);
        assert_eq!(f.fields, expected);
    }

    #[test]
    fn parse_format_other_fixtures() {
        // sched_waking's target_cpu is an int; ftrace:print's buf runs to the end of the
        // record (size 0, not __data_loc) on this kernel.
        let waking = format_of("sched_waking");
        assert_eq!(
            waking.field("target_cpu"),
            Some(&field("target_cpu", 32, 4, true))
        );
        let print = format_of("print");
        assert_eq!((print.system.as_str(), print.id), ("ftrace", 5));
        assert_eq!(print.field("buf"), Some(&field("buf", 16, 0, false)));
        let nmi = format_of("nmi_handler");
        assert_eq!(nmi.field("delta_ns"), Some(&field("delta_ns", 16, 8, true)));
        let formats = all_formats();
        let mut ids: Vec<u16> = formats.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), FORMATS.len());
        for ((_, name, _), f) in FORMATS.iter().zip(&formats) {
            assert_eq!(&f.name, name);
            assert_eq!(f.fields[..4], common_fields()[..], "{name}");
        }
    }

    #[test]
    fn parse_format_malformed() {
        let good = FORMATS[0].2;
        let cases = [
            String::new(),
            "garbage\n\u{0}\u{ffff}".to_string(),
            good.replace("name: sched_switch", ""),
            good.replace("ID: 372", ""),
            good.replace("ID: 372", "ID: 70000"),
            good.replace("ID: 372", "ID: -1"),
            good.replace("offset:24;", ""),
            good.replace("size:16;\tsigned:0;\n\tfield:pid_t", "\n\tfield:pid_t"),
            good.replace("offset:24;", "offset:twenty-four;"),
            good.replace("pid_t prev_pid", "pid_t 9"),
            good.replace("char next_comm[16]", "char [16]"),
            "name: x\nID: 1\nformat:\n".to_string(),
            "name: x\nID: 1\nformat:\n\tfield:int a;\toffset:8;".to_string(),
            "name: x\nID: 1\nformat:\n\tfield\n".to_string(),
        ];
        for text in &cases {
            let r = parse_format("sched", text);
            assert!(r.is_err(), "{text:?} gave {r:?}");
        }
    }

    #[test]
    fn parse_header_page_real() {
        // The kernel also lists `int overwrite` at offset 8, inside `commit`: ignored.
        assert_eq!(
            layout(),
            PageLayout {
                commit_offset: 8,
                commit_size: 8,
                data_offset: 16,
            }
        );
        let thirty_two_bit = HEADER_PAGE
            .replace("commit;\toffset:8;\tsize:8;", "commit;\toffset:8;\tsize:4;")
            .replace("data;\toffset:16;", "data;\toffset:12;");
        assert_eq!(
            parse_header_page(&thirty_two_bit),
            Ok(PageLayout {
                commit_offset: 8,
                commit_size: 4,
                data_offset: 12,
            })
        );
    }

    #[test]
    fn parse_header_page_malformed() {
        let cases = [
            String::new(),
            HEADER_PAGE.replace("local_t commit", "local_t committed"),
            HEADER_PAGE.replace("char data", "char payload"),
            HEADER_PAGE.replace("commit;\toffset:8;\tsize:8;", "commit;\toffset:8;\tsize:3;"),
            HEADER_PAGE.replace("data;\toffset:16;", "data;\toffset:12;"),
            HEADER_PAGE.replace("timestamp;\toffset:0;", "timestamp;\toffset:4;"),
            HEADER_PAGE.replace("offset:8;\tsize:8;", "offset:8;"),
        ];
        for text in &cases {
            let r = parse_header_page(text);
            assert!(r.is_err(), "{text:?} gave {r:?}");
        }
    }

    // ---------------------------------------------------------------- real pages

    /// One line of the text `trace`: time in µs, event name (the function for markers) and
    /// the text after it.
    #[derive(Debug)]
    struct TextEvent {
        us: u64,
        name: String,
        args: String,
    }

    fn parse_text(text: &str) -> Vec<TextEvent> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                // `   TASK-PID   [CPU] FLAGS  SECONDS.MICROS: EVENT: ARGS`
                let (head, rest) = l.split_once(": ").expect("a time stamp");
                let stamp = head.rsplit(' ').next().expect("a time stamp");
                let (s, frac) = stamp.split_once('.').expect("seconds.micros");
                assert_eq!(frac.len(), 6, "{l}");
                let us = s.parse::<u64>().expect("seconds") * 1_000_000
                    + frac.parse::<u64>().expect("micros");
                let (name, args) = rest.split_once(": ").unwrap_or((rest, ""));
                TextEvent {
                    us,
                    name: name.to_string(),
                    args: args.to_string(),
                }
            })
            .collect()
    }

    /// The value of `key=value` in a text event's arguments.
    fn arg<'a>(t: &'a TextEvent, key: &str) -> &'a str {
        t.args
            .split(' ')
            .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
            .unwrap_or_else(|| panic!("no {key} in {t:?}"))
    }

    fn num(t: &TextEvent, key: &str) -> i64 {
        arg(t, key)
            .parse()
            .unwrap_or_else(|_| panic!("{key} in {t:?}"))
    }

    /// How the kernel's print format of sched_switch shows `prev_state`.
    fn state_letters(state: i64) -> String {
        let letters = ["S", "D", "T", "t", "X", "Z", "P", "I"];
        let set: Vec<&str> = (0..8)
            .filter(|b| state & (1 << b) != 0)
            .map(|b| letters[b])
            .collect();
        let mut s = if set.is_empty() {
            "R".to_string()
        } else {
            set.join("|")
        };
        if state & 0x100 != 0 {
            s.push('+');
        }
        s
    }

    /// The name the text trace gives `e`.
    fn text_name(e: &Event) -> String {
        match e {
            Event::Switch { .. } => "sched_switch".into(),
            Event::Wakeup { waking: true, .. } => "sched_waking".into(),
            Event::Wakeup { waking: false, .. } => "sched_wakeup".into(),
            Event::IrqEntry { .. } => "irq_handler_entry".into(),
            Event::IrqExit { .. } => "irq_handler_exit".into(),
            Event::SoftirqEntry { .. } => "softirq_entry".into(),
            Event::SoftirqExit { .. } => "softirq_exit".into(),
            Event::SoftirqRaise { .. } => "softirq_raise".into(),
            Event::VectorEntry { name, .. } => format!("{name}_entry"),
            Event::VectorExit { name, .. } => format!("{name}_exit"),
            Event::Nmi { .. } => "nmi_handler".into(),
            Event::HrtimerStart { .. } => "hrtimer_start".into(),
            Event::HrtimerEntry { .. } => "hrtimer_expire_entry".into(),
            Event::HrtimerExit => "hrtimer_expire_exit".into(),
            Event::WorkStart { .. } => "workqueue_execute_start".into(),
            Event::WorkEnd { .. } => "workqueue_execute_end".into(),
            // The text shows the marker's caller, then its text.
            Event::Marker { .. } => "tracing_mark_write".into(),
            Event::Other { id } => format!("other {id}"),
        }
    }

    /// Checks decoded events against the text trace the kernel printed for the same buffer:
    /// same count, same order, same time to the µs (the text rounds ns to the nearest µs), same
    /// key fields.
    fn check_against_text(events: &[(u64, Event)], text: &str) {
        let lines = parse_text(text);
        assert_eq!(events.len(), lines.len());
        for (i, ((ts, e), t)) in events.iter().zip(&lines).enumerate() {
            let at = format!("event {i}: {e:?} vs {t:?}");
            assert_eq!((ts + 500) / 1000, t.us, "{at}");
            assert_eq!(text_name(e), t.name, "{at}");
            match e {
                Event::Switch {
                    prev_pid,
                    prev_comm,
                    prev_prio,
                    prev_state,
                    next_pid,
                    next_comm,
                    next_prio,
                } => {
                    assert_eq!(prev_comm, arg(t, "prev_comm"), "{at}");
                    assert_eq!(i64::from(*prev_prio), num(t, "prev_prio"), "{at}");
                    assert_eq!(i64::from(*prev_pid), num(t, "prev_pid"), "{at}");
                    assert_eq!(state_letters(*prev_state), arg(t, "prev_state"), "{at}");
                    assert_eq!(next_comm, arg(t, "next_comm"), "{at}");
                    assert_eq!(i64::from(*next_pid), num(t, "next_pid"), "{at}");
                    assert_eq!(i64::from(*next_prio), num(t, "next_prio"), "{at}");
                }
                Event::Wakeup {
                    pid,
                    comm,
                    target_cpu,
                    ..
                } => {
                    assert_eq!(comm, arg(t, "comm"), "{at}");
                    assert_eq!(i64::from(*pid), num(t, "pid"), "{at}");
                    assert_eq!(i64::from(*target_cpu), num(t, "target_cpu"), "{at}");
                }
                Event::IrqEntry { irq, name } => {
                    assert_eq!(i64::from(*irq), num(t, "irq"), "{at}");
                    assert_eq!(name, arg(t, "name"), "{at}");
                }
                Event::IrqExit { irq } => assert_eq!(i64::from(*irq), num(t, "irq"), "{at}"),
                Event::SoftirqEntry { vec }
                | Event::SoftirqExit { vec }
                | Event::SoftirqRaise { vec } => {
                    assert_eq!(i64::from(*vec), num(t, "vec"), "{at}")
                }
                Event::VectorEntry { vector, .. } | Event::VectorExit { vector, .. } => {
                    assert_eq!(i64::from(*vector), num(t, "vector"), "{at}")
                }
                Event::Marker { text } => assert_eq!(text, &t.args, "{at}"),
                // The text shows these addresses as symbols.
                Event::HrtimerEntry {
                    function, now_ns, ..
                } => {
                    assert!(*function >= 0xffff_8000_0000_0000, "{at}");
                    assert_eq!(*now_ns, num(t, "now"), "{at}");
                }
                Event::HrtimerStart {
                    function,
                    expires_ns,
                    softexpires_ns,
                    ..
                } => {
                    assert!(*function >= 0xffff_8000_0000_0000, "{at}");
                    assert_eq!(*expires_ns, num(t, "expires"), "{at}");
                    assert_eq!(*softexpires_ns, num(t, "softexpires"), "{at}");
                }
                Event::WorkStart { function } | Event::WorkEnd { function } => {
                    assert!(*function >= 0xffff_8000_0000_0000, "{at}")
                }
                Event::HrtimerExit | Event::Nmi { .. } => {}
                Event::Other { .. } => panic!("undecoded {at}"),
            }
        }
    }

    fn decode_all(raw: &[u8]) -> (Vec<PageInfo>, Vec<(u64, Event)>) {
        let decoder = Decoder::new(&all_formats());
        let (infos, records) = walk(raw);
        let events = records
            .iter()
            .map(|(ts, rec)| (*ts, decoder.decode(rec).expect("a decodable record")))
            .collect();
        (infos, events)
    }

    #[test]
    fn real_pages_match_the_text_trace() {
        let mut text = String::new();
        flate2::read::GzDecoder::new(BUSY_TEXT_GZ)
            .read_to_string(&mut text)
            .expect("gzipped text");
        let (infos, events) = decode_all(BUSY_RAW);
        assert_eq!(infos.len(), 3);
        assert_eq!(
            infos.iter().map(|i| i.events).collect::<Vec<_>>(),
            [148, 121, 20]
        );
        assert!(infos
            .iter()
            .all(|i| !i.missed_before && i.missed_count.is_none()));
        assert!(events.windows(2).all(|w| w[0].0 <= w[1].0));
        // The first events exactly as the kernel printed them, then every event's key fields.
        assert_eq!(events[0].0 / 1000, 29_427_369_347);
        assert_eq!(
            events[..6]
                .iter()
                .map(|(_, e)| e.clone())
                .collect::<Vec<_>>(),
            [
                Event::IrqEntry {
                    irq: 36,
                    name: "virtio1-req.0".into()
                },
                Event::IrqExit { irq: 36 },
                Event::SoftirqEntry { vec: 4 },
                Event::Wakeup {
                    waking: true,
                    pid: 16985,
                    comm: "python3".into(),
                    target_cpu: 0
                },
                Event::SoftirqExit { vec: 4 },
                Event::IrqEntry {
                    irq: 36,
                    name: "virtio1-req.0".into()
                },
            ]
        );
        check_against_text(&events, &text);
        let has = |p: &dyn Fn(&Event) -> bool| events.iter().any(|(_, e)| p(e));
        assert!(has(&|e| matches!(e, Event::Switch { .. })));
        assert!(has(&|e| matches!(e, Event::Wakeup { waking: false, .. })));
        assert!(has(
            &|e| matches!(e, Event::VectorEntry { name, vector: 236 } if name == "local_timer")
        ));
        assert!(has(&|e| matches!(e, Event::HrtimerEntry { .. })));
        assert!(has(&|e| matches!(e, Event::WorkStart { .. })));
        // The long marker needed a type_len 0 record.
        let long = format!(
            "a long marker that does not fit in a small record: {} end",
            "0123456789".repeat(8)
        );
        assert!(has(&|e| *e == Event::Marker { text: long.clone() }));
        assert!(has(&|e| *e
            == Event::Marker {
                text: "hello from cpu1".into()
            }));
    }

    #[test]
    fn real_page_with_time_extends() {
        let (infos, events) = decode_all(EXTEND_RAW);
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].events, 11);
        check_against_text(&events, EXTEND_TEXT);
        // Gaps longer than a 27-bit delta can only come from time extends.
        let gaps = events
            .windows(2)
            .filter(|w| w[1].0 - w[0].0 >= 1 << 27)
            .count();
        assert!(gaps >= 2, "{gaps}");
        assert_eq!(
            events[0],
            (
                29_446_468_642_445,
                Event::Marker {
                    text: "mark 0".into()
                }
            )
        );
    }

    #[test]
    fn real_page_after_lost_events() {
        // The kernel wrote commit as 0xffffffff_c0000fdc: both flags, sign-extended.
        assert_eq!(
            &OVERFLOW_RAW[8..16],
            &0xffff_ffff_c000_0fdc_u64.to_le_bytes()
        );
        let (infos, events) = decode_all(OVERFLOW_RAW);
        assert_eq!(
            infos,
            [PageInfo {
                events: 76,
                missed_before: true,
                missed_count: Some(2825),
            }]
        );
        // 29472.425319 in the text trace.
        assert_eq!((events[0].0 + 500) / 1000, 29_472_425_319);
        for (k, (_, e)) in events.iter().enumerate() {
            let i = 2825 + k;
            let text = format!("overflow mark {i} {}", "x".repeat(i * 7 % 23));
            assert_eq!(e, &Event::Marker { text });
        }
    }

    // ---------------------------------------------------------------- synthetic pages

    /// Builds the data of a page record by record, as a 64-bit kernel lays it out.
    struct Page {
        ts: u64,
        data: Vec<u8>,
    }

    impl Page {
        fn new(ts: u64) -> Page {
            Page {
                ts,
                data: Vec::new(),
            }
        }

        fn word(&mut self, v: u32) -> &mut Page {
            self.data.extend_from_slice(&v.to_le_bytes());
            self
        }

        fn header(&mut self, type_len: u32, delta: u32) -> &mut Page {
            assert!(type_len < 32 && delta < 1 << 27);
            self.word(type_len | delta << 5)
        }

        /// A data record: short (type_len 1 to 28) when it can be.
        fn event(&mut self, delta: u32, rec: &[u8]) -> &mut Page {
            assert!(!rec.is_empty() && rec.len().is_multiple_of(4));
            if rec.len() <= 112 {
                self.header(rec.len() as u32 / 4, delta);
                self.data.extend_from_slice(rec);
                self
            } else {
                self.long_event(delta, rec)
            }
        }

        /// A data record with its length in array[0] (type_len 0).
        fn long_event(&mut self, delta: u32, rec: &[u8]) -> &mut Page {
            self.header(0, delta).word(rec.len() as u32 + 4);
            self.data.extend_from_slice(rec);
            self
        }

        fn extend(&mut self, delta: u64) -> &mut Page {
            self.header(30, (delta & 0x7ff_ffff) as u32)
                .word((delta >> 27) as u32)
        }

        fn stamp(&mut self, ts: u64) -> &mut Page {
            self.header(31, (ts & 0x7ff_ffff) as u32)
                .word((ts >> 27) as u32)
        }

        /// Padding of `len` bytes in all.
        fn padding(&mut self, delta: u32, len: usize) -> &mut Page {
            self.header(29, delta).word(len as u32 - 4);
            self.data.resize(self.data.len() + len - 8, 0xee);
            self
        }

        /// The page with `commit` as its commit word.
        fn with_commit(&self, commit: u64) -> Vec<u8> {
            let mut page = Vec::with_capacity(4096);
            page.extend_from_slice(&self.ts.to_le_bytes());
            page.extend_from_slice(&commit.to_le_bytes());
            page.extend_from_slice(&self.data);
            page.resize(4096, 0);
            page
        }

        fn page(&self) -> Vec<u8> {
            self.with_commit(self.data.len() as u64)
        }
    }

    /// A record of event `id` with `len` bytes in all, each after the id being `fill`.
    fn rec(id: u16, len: usize, fill: u8) -> Vec<u8> {
        let mut r = vec![fill; len];
        r[..2].copy_from_slice(&id.to_le_bytes());
        r
    }

    fn collect(page: &[u8], layout: &PageLayout) -> Result<(PageInfo, Records), DecodeError> {
        let mut events = Vec::new();
        let info = parse_page(page, layout, &mut |ts, r| events.push((ts, r.to_vec())))?;
        Ok((info, events))
    }

    fn times(page: &[u8]) -> Vec<u64> {
        let (_, events) = collect(page, &layout()).expect("a valid page");
        events.into_iter().map(|(ts, _)| ts).collect()
    }

    #[test]
    fn synthetic_time_extend() {
        let (a, b) = (rec(1, 8, 0xaa), rec(2, 12, 0xbb));
        let mut p = Page::new(1_000);
        p.event(5, &a)
            .extend((3 << 27) + 7)
            .event(2, &b)
            .extend(1)
            .event(0, &a);
        let (info, events) = collect(&p.page(), &layout()).expect("a valid page");
        assert_eq!(
            info,
            PageInfo {
                events: 3,
                ..PageInfo::default()
            }
        );
        let t1 = 1_005 + (3 << 27) + 7 + 2;
        assert_eq!(events, [(1_005, a.clone()), (t1, b), (t1 + 1, a)]);
    }

    #[test]
    fn synthetic_absolute_time_stamp() {
        let a = rec(1, 8, 0);
        let mut p = Page::new(1_000);
        p.event(10, &a)
            .stamp(5_000_000_000_000)
            .event(4, &a)
            .extend(1 << 30)
            .event(1, &a);
        assert_eq!(
            times(&p.page()),
            [1_010, 5_000_000_000_004, 5_000_000_000_005 + (1 << 30)]
        );
        // The record holds 59 bits; the top ones come from the running time, with a carry
        // when the low bits wrapped around since.
        let top = 1u64 << 60;
        let mut p = Page::new(top | 100);
        p.stamp(top | 5_000).event(0, &a);
        assert_eq!(times(&p.page()), [top | 5_000]);
        let mut p = Page::new(top | ((1 << 59) - 10));
        p.stamp(5).event(3, &a);
        assert_eq!(times(&p.page()), [top + (1 << 59) + 8]);
    }

    #[test]
    fn synthetic_padding() {
        let a = rec(1, 8, 0x11);
        // A discarded event in the middle keeps its time delta to itself.
        let mut p = Page::new(0);
        p.event(10, &a).padding(1, 16).event(3, &a).padding(77, 24);
        let (info, events) = collect(&p.page(), &layout()).expect("a valid page");
        assert_eq!(info.events, 2);
        assert_eq!(events, [(10, a.clone()), (13, a.clone())]);
        // Padding with a zero delta ends the page, whatever follows it.
        let mut p = Page::new(0);
        p.event(10, &a)
            .header(29, 0)
            .word(0xffff_ffff)
            .word(0xdead_beef);
        assert_eq!(times(&p.page()), [10]);
        // Padding to the end of a full page, as the kernel leaves a page that had no room.
        let mut p = Page::new(0);
        p.event(1, &a);
        let rest = 4080 - p.data.len();
        p.padding(1, rest);
        assert_eq!(p.data.len(), 4080);
        assert_eq!(times(&p.page()), [1]);
        // Padding that runs past the data.
        let mut p = Page::new(0);
        p.event(1, &a).header(29, 1).word(100);
        let err = collect(&p.page(), &layout()).expect_err("padding past the data");
        assert_eq!(
            err,
            DecodeError::RecordPastEnd {
                type_len: 29,
                offset: 28,
                size: 104,
                end: 36
            }
        );
        assert!(err.to_string().contains("byte offset 28"), "{err}");
    }

    #[test]
    fn synthetic_long_records() {
        let long = rec(7, 200, 0x5a);
        let short = rec(8, 112, 0x5b);
        let mut p = Page::new(50);
        p.event(1, &long)
            .event(2, &short)
            .long_event(3, &rec(9, 4, 0));
        let (info, events) = collect(&p.page(), &layout()).expect("a valid page");
        assert_eq!(info.events, 3);
        assert_eq!(events[0], (51, long));
        assert_eq!(events[1], (53, short));
        assert_eq!(events[2], (56, rec(9, 4, 0)));
        // array[0] counts itself: less than 4 cannot be.
        let mut p = Page::new(0);
        p.header(0, 0).word(3).word(0);
        let err = collect(&p.page(), &layout()).expect_err("a bad length");
        assert_eq!(err, DecodeError::LongRecordLength { offset: 16, len: 3 });
        assert!(err.to_string().contains("byte offset 16"), "{err}");
    }

    #[test]
    fn synthetic_missed_events() {
        let a = rec(1, 8, 0);
        let mut p = Page::new(0);
        p.event(1, &a);
        let len = p.data.len() as u64;
        let (info, _) = collect(&p.with_commit(len | 1 << 31), &layout()).expect("valid");
        assert_eq!(
            info,
            PageInfo {
                events: 1,
                missed_before: true,
                missed_count: None,
            }
        );
        // With the count after the data, and the flags sign-extended as a 64-bit kernel
        // writes them.
        p.data.extend_from_slice(&12_345u64.to_le_bytes());
        for commit in [len | 3 << 30, len | 0xffff_ffff_c000_0000] {
            let (info, _) = collect(&p.with_commit(commit), &layout()).expect("valid");
            assert_eq!(
                info,
                PageInfo {
                    events: 1,
                    missed_before: true,
                    missed_count: Some(12_345),
                }
            );
        }
        // A 32-bit kernel: a 4-byte commit and count, data at 12.
        let small = PageLayout {
            commit_offset: 8,
            commit_size: 4,
            data_offset: 12,
        };
        let mut page = 7u64.to_le_bytes().to_vec();
        page.extend_from_slice(&(12u32 | 3 << 30).to_le_bytes());
        page.extend_from_slice(&(2u32 | 5 << 5).to_le_bytes());
        page.extend_from_slice(&a);
        page.extend_from_slice(&99u32.to_le_bytes());
        let (info, events) = collect(&page, &small).expect("valid");
        assert_eq!(info.missed_count, Some(99));
        assert_eq!(events, [(12, a)]);
    }

    #[test]
    fn synthetic_malformed_pages() {
        let a = rec(1, 8, 0);
        let mut p = Page::new(0);
        p.event(1, &a).event(1, &a);
        let l = layout();
        let expect_err = |page: &[u8], layout: &PageLayout, needle: &str| {
            let err = collect(page, layout).expect_err("a malformed page");
            assert!(err.to_string().contains(needle), "{err:?} lacks {needle:?}");
        };
        // A commit length beyond the page.
        expect_err(&p.with_commit(4081), &l, "commit length 4081");
        expect_err(&p.with_commit(0x3fff_ffff), &l, "byte offset 8");
        // A page cut short, and one too short for its header.
        let whole = p.page();
        expect_err(&whole[..30], &l, "30-byte page");
        expect_err(&whole[..12], &l, "byte offset 8");
        expect_err(&whole[..4], &l, "time stamp");
        expect_err(&[], &l, "time stamp");
        // A commit that ends inside a record, or inside a record header.
        expect_err(&p.with_commit(8), &l, "type_len 2 at byte offset 16");
        expect_err(&p.with_commit(20), &l, "at byte offset 28 is 12 bytes long");
        expect_err(&p.with_commit(14), &l, "record header at byte offset 28");
        // A stored count of missed events with no room for it.
        let mut full = Page::new(0);
        full.padding(1, 4080);
        expect_err(&full.with_commit(4080 | 3 << 30), &l, "byte offset 4096");
        // A layout that does not fit the page.
        let odd = PageLayout {
            commit_offset: 4094,
            commit_size: 8,
            data_offset: 16,
        };
        expect_err(&whole, &odd, "commit word");
        // An empty page is fine.
        let (info, events) = collect(&Page::new(5).page(), &l).expect("an empty page");
        assert_eq!((info, events.len()), (PageInfo::default(), 0));
    }

    // ---------------------------------------------------------------- decoding

    /// A record of `format` with `values` (little-endian bytes) at the named fields.
    fn record(format: &Format, len: usize, values: &[(&str, &[u8])]) -> Vec<u8> {
        let mut r = vec![0u8; len];
        r[..2].copy_from_slice(&format.id.to_le_bytes());
        for (name, bytes) in values {
            let f = format.field(name).expect("a field");
            r[f.offset..f.offset + bytes.len()].copy_from_slice(bytes);
        }
        r
    }

    #[test]
    fn decode_synthetic_records() {
        let d = Decoder::new(&all_formats());
        let switch = format_of("sched_switch");
        let r = record(
            &switch,
            64,
            &[
                ("prev_comm", b"worker\0garbage"),
                ("prev_pid", &(-5i32).to_le_bytes()),
                ("prev_prio", &(98i32).to_le_bytes()),
                ("prev_state", &(0x102i64).to_le_bytes()),
                ("next_comm", b"sixteen-bytes-xy"),
                ("next_pid", &77i32.to_le_bytes()),
                ("next_prio", &(-1i32).to_le_bytes()),
            ],
        );
        let expected = Event::Switch {
            prev_pid: -5,
            prev_comm: "worker".into(),
            prev_prio: 98,
            prev_state: 0x102,
            next_pid: 77,
            next_comm: "sixteen-bytes-xy".into(),
            next_prio: -1,
        };
        assert_eq!(d.decode(&r), Ok(expected.clone()));
        // Too short for next_prio.
        let err = d.decode(&r[..62]).expect_err("a short record");
        let text = err.to_string();
        assert!(
            text.contains("sched:sched_switch") && text.contains("next_prio"),
            "{err}"
        );
        assert!(
            matches!(
                &err,
                DecodeError::Record { event, id: 372, source }
                    if event == "sched:sched_switch"
                        && matches!(**source, DecodeError::FieldPastEnd { field: "next_prio", .. })
            ),
            "{err:?}"
        );

        let irq = format_of("irq_handler_entry");
        let mut r = record(&irq, 24, &[("irq", &9i32.to_le_bytes())]);
        r[12..16].copy_from_slice(&(16u32 | 6 << 16).to_le_bytes());
        r[16..22].copy_from_slice(b"eth0\0\0");
        assert_eq!(
            d.decode(&r),
            Ok(Event::IrqEntry {
                irq: 9,
                name: "eth0".into()
            })
        );
        // A __data_loc pointing past the record.
        r[12..16].copy_from_slice(&(20u32 | 8 << 16).to_le_bytes());
        let err = d.decode(&r).expect_err("out of the record");
        assert!(err.to_string().contains("__data_loc"), "{err}");

        let nmi = format_of("nmi_handler");
        let r = record(
            &nmi,
            28,
            &[
                ("handler", &0xffff_ffff_8100_0000u64.to_le_bytes()),
                ("delta_ns", &(-3i64).to_le_bytes()),
            ],
        );
        assert_eq!(
            d.decode(&r),
            Ok(Event::Nmi {
                handler: 0xffff_ffff_8100_0000,
                delta_ns: -3
            })
        );

        let print = format_of("print");
        let r = record(&print, 28, &[("buf", b"hi there\n\0")]);
        assert_eq!(
            d.decode(&r),
            Ok(Event::Marker {
                text: "hi there".into()
            })
        );

        let exit = format_of("workqueue_execute_end");
        let r = record(&exit, 24, &[("function", &0x1234u64.to_le_bytes())]);
        assert_eq!(d.decode(&r), Ok(Event::WorkEnd { function: 0x1234 }));
        let timer = format_of("local_timer_exit");
        let r = record(&timer, 12, &[("vector", &236i32.to_le_bytes())]);
        assert_eq!(
            d.decode(&r),
            Ok(Event::VectorExit {
                name: "local_timer".into(),
                vector: 236
            })
        );

        // Ids the decoder was not given.
        assert_eq!(d.decode(&rec(4242, 8, 0)), Ok(Event::Other { id: 4242 }));
        assert_eq!(
            d.decode(&[5, 0]),
            Err(d.decode(&[5, 0]).expect_err("too short"))
        );
        assert!(d.decode(&[5]).is_err());
        assert!(d.decode(&[]).is_err());
        assert_eq!(
            Decoder::new(&[]).decode(&r),
            Ok(Event::Other { id: timer.id })
        );
    }

    #[test]
    fn decode_other_kernel_layouts() {
        // prev_state as an `unsigned int`, fields moved, and a waking event without
        // target_cpu; ftrace:print with a __data_loc buf; a workqueue end without function.
        let switch = parse_format(
            "sched",
            "name: sched_switch\nID: 300\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
             \tfield:unsigned int prev_state;\toffset:32;\tsize:4;\tsigned:0;\n\
             \tfield:char next_comm[16];\toffset:36;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t next_pid;\toffset:52;\tsize:4;\tsigned:1;\n\
             \tfield:int next_prio;\toffset:56;\tsize:4;\tsigned:1;\n",
        )
        .expect("a valid format");
        let waking = parse_format(
            "sched",
            "name: sched_waking\nID: 301\nformat:\n\
             \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n",
        )
        .expect("a valid format");
        let print = parse_format(
            "ftrace",
            "name: print\nID: 5\nformat:\n\
             \tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:__data_loc char[] buf;\toffset:16;\tsize:4;\tsigned:0;\n",
        )
        .expect("a valid format");
        let end = parse_format(
            "workqueue",
            "name: workqueue_execute_end\nID: 302\nformat:\n\
             \tfield:void * work;\toffset:8;\tsize:8;\tsigned:0;\n",
        )
        .expect("a valid format");
        // An event sandglass knows, but without a field it needs.
        let broken = parse_format(
            "irq",
            "name: softirq_entry\nID: 303\nformat:\n\
             \tfield:unsigned int vector;\toffset:8;\tsize:4;\tsigned:0;\n",
        )
        .expect("a valid format");
        let d = Decoder::new(&[switch.clone(), waking.clone(), print.clone(), end, broken]);

        let r = record(
            &switch,
            60,
            &[
                ("prev_comm", b"a"),
                ("prev_state", &0x8000_0001u32.to_le_bytes()),
                ("next_comm", b"b"),
                ("next_pid", &3i32.to_le_bytes()),
            ],
        );
        assert_eq!(
            d.decode(&r),
            Ok(Event::Switch {
                prev_pid: 0,
                prev_comm: "a".into(),
                prev_prio: 0,
                prev_state: 0x8000_0001,
                next_pid: 3,
                next_comm: "b".into(),
                next_prio: 0,
            })
        );
        let r = record(&waking, 28, &[("comm", b"w"), ("pid", &8i32.to_le_bytes())]);
        assert_eq!(
            d.decode(&r),
            Ok(Event::Wakeup {
                waking: true,
                pid: 8,
                comm: "w".into(),
                target_cpu: -1
            })
        );
        let mut r = record(&print, 28, &[("buf", &(20u32 | 6 << 16).to_le_bytes())]);
        r[20..26].copy_from_slice(b"mark\n\0");
        assert_eq!(
            d.decode(&r),
            Ok(Event::Marker {
                text: "mark".into()
            })
        );
        assert_eq!(
            d.decode(&rec(302, 16, 0)),
            Ok(Event::WorkEnd { function: 0 })
        );
        let err = d.decode(&rec(303, 12, 0)).expect_err("no vec field");
        assert!(err.to_string().contains("`vec`"), "{err}");
    }

    // ---------------------------------------------------------------- never panics

    fn arb_field() -> impl Strategy<Value = Field> {
        (
            prop::sample::select(vec![
                "prev_pid",
                "prev_comm",
                "prev_state",
                "next_pid",
                "next_comm",
                "next_prio",
                "pid",
                "comm",
                "target_cpu",
                "irq",
                "name",
                "vec",
                "vector",
                "handler",
                "delta_ns",
                "function",
                "buf",
            ]),
            0usize..80,
            0usize..20,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(name, offset, size, signed, data_loc)| Field {
                name: name.to_string(),
                offset,
                size,
                signed,
                data_loc,
            })
    }

    fn arb_format() -> impl Strategy<Value = Format> {
        (
            prop::sample::select(FORMATS.to_vec()),
            any::<u16>(),
            prop::collection::vec(arb_field(), 0..12),
        )
            .prop_map(|((system, name, _), id, fields)| Format {
                system: system.to_string(),
                name: name.to_string(),
                id: id % 8,
                fields,
            })
    }

    /// Texts made of the words of format files.
    const FORMAT_WORDS: &str =
        "(name: |ID: |field:|offset:|size:|signed:|\\[|\\]|;|\\*| |\\t|\\n|[a-z_0-9]{1,4})*";

    proptest! {
        #[test]
        fn parse_page_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..4200)) {
            let _ = parse_page(&bytes, &layout(), &mut |_, _| {});
        }

        #[test]
        fn parse_page_never_panics_on_plausible_pages(
            ts in any::<u64>(),
            flags in 0u64..4,
            high in prop::sample::select(vec![0u64, 0xffff_ffff_0000_0000, 0x1234_0000_0000]),
            data in prop::collection::vec(any::<u8>(), 0..4080),
            cut in 0usize..4200,
        ) {
            let mut page = ts.to_le_bytes().to_vec();
            page.extend_from_slice(&(data.len() as u64 | flags << 30 | high).to_le_bytes());
            page.extend_from_slice(&data);
            page.resize(4096, 0);
            page.truncate(cut.max(16));
            let decoder = Decoder::new(&all_formats());
            let r = parse_page(&page, &layout(), &mut |_, rec| {
                let _ = decoder.decode(rec);
            });
            if let Ok(info) = r {
                prop_assert!(info.events <= 4096 / 8);
            }
        }

        #[test]
        fn parse_page_never_panics_on_odd_layouts(
            bytes in prop::collection::vec(any::<u8>(), 0..200),
            commit_offset in 0usize..300,
            commit_size in 0usize..12,
            data_offset in prop::sample::select(vec![0usize, 3, 16, 199, 1 << 40, usize::MAX]),
        ) {
            let layout = PageLayout { commit_offset, commit_size, data_offset };
            let _ = parse_page(&bytes, &layout, &mut |_, _| {});
        }

        #[test]
        fn decode_never_panics(
            id in prop::sample::select(vec![372u16, 375, 374, 225, 224, 223, 222, 165, 164, 459,
                                            458, 335, 334, 170, 5, 1, 0xffff]),
            rest in prop::collection::vec(any::<u8>(), 0..120),
            raw in prop::collection::vec(any::<u8>(), 0..120),
        ) {
            let d = Decoder::new(&all_formats());
            let _ = d.decode(&raw);
            let mut rec = id.to_le_bytes().to_vec();
            rec.extend_from_slice(&rest);
            let _ = d.decode(&rec);
        }

        #[test]
        fn decode_never_panics_with_odd_formats(
            formats in prop::collection::vec(arb_format(), 0..6),
            id in 0u16..8,
            rest in prop::collection::vec(any::<u8>(), 0..100),
        ) {
            let d = Decoder::new(&formats);
            let mut rec = id.to_le_bytes().to_vec();
            rec.extend_from_slice(&rest);
            let _ = d.decode(&rec);
        }

        #[test]
        fn parse_format_never_panics(text in FORMAT_WORDS) {
            let _ = parse_format("x", &text);
            let _ = parse_header_page(&text);
        }
    }

    /// Pages kept on disk as a run reads them decode, after the run, to the events of the same
    /// pages decoded at once, the clock-check marker left out.
    #[test]
    fn pages_kept_on_disk_decode_to_the_same_events() {
        use crate::causes::tracefs::{KernelTrace, RawPages};
        let decoder = Decoder::new(&all_formats());
        let mut direct: Vec<Traced> = Vec::new();
        for page in BUSY_RAW.chunks(4096) {
            parse_page(page, &layout(), &mut |ts, rec| {
                let event = decoder.decode(rec).expect("decoded");
                direct.push(Traced {
                    ts_ns: ts,
                    cpu: 1,
                    pid: rec
                        .get(4..8)
                        .map(|b| i32::from_ne_bytes(b.try_into().unwrap())),
                    event,
                });
            })
            .expect("a page");
        }
        assert!(direct.len() > 100);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("cpu1.raw");
        std::fs::write(&path, BUSY_RAW).unwrap();
        let k = KernelTrace {
            cpus: vec![1],
            raw: Some(RawPages {
                dir: tmp.path().to_path_buf(),
                files: vec![(1, path)],
                layout: layout(),
                decoder,
            }),
            ..KernelTrace::default()
        };
        let mut back = Vec::new();
        let n = k.each_event(|e| back.push(e)).unwrap();
        assert_eq!(back, direct);
        assert_eq!((n.events, n.undecoded), (direct.len() as u64, 0));
        k.remove_spill();
        assert!(!tmp.path().exists());
    }
}
