//! `mqblk info`'s partition listing: the device's GPT or MBR table with the
//! same start, size, type, uuid and name that `sfdisk --json` prints, as
//! text, or as sfdisk's `partitiontable` object with `--json`.

use mqblk::part::{partition_name, Label, PartitionTable};
use serde_json::{json, Map, Value};

/// sfdisk's `partitiontable` object for `table`, with `device` as the
/// disk's name (nodes are named after it, as Linux names partitions).
pub fn sfdisk_json(table: &PartitionTable, device: &str) -> Value {
    let mut t = Map::new();
    t.insert("label".into(), json!(table.label.as_str()));
    t.insert("id".into(), json!(table.id));
    t.insert("device".into(), json!(device));
    t.insert("unit".into(), json!("sectors"));
    if table.label == Label::Gpt {
        t.insert("firstlba".into(), json!(table.first_lba));
        t.insert("lastlba".into(), json!(table.last_lba));
    }
    t.insert("sectorsize".into(), json!(table.sector_size));
    let parts: Vec<Value> = table
        .partitions
        .iter()
        .map(|p| {
            let mut o = Map::new();
            o.insert("node".into(), json!(partition_name(device, p.number)));
            o.insert("start".into(), json!(p.start_sector));
            o.insert("size".into(), json!(p.nr_sectors));
            o.insert("type".into(), json!(p.type_.to_string()));
            if let Some(u) = p.uuid {
                o.insert("uuid".into(), json!(u.to_string()));
            }
            if let Some(n) = p.name.as_ref().filter(|n| !n.is_empty()) {
                o.insert("name".into(), json!(n));
            }
            if p.bootable {
                o.insert("bootable".into(), json!(true));
            }
            Value::Object(o)
        })
        .collect();
    t.insert("partitions".into(), Value::Array(parts));
    Value::Object(t)
}

/// The text listing: a header line, then one line per partition.
pub fn text(table: &PartitionTable, device: &str) -> Vec<String> {
    let mut out = vec![format!(
        "{} (id {}), {}-byte sectors{}",
        table.label.as_str(),
        table.id,
        table.sector_size,
        match (table.first_lba, table.last_lba) {
            (Some(f), Some(l)) => format!(", usable LBAs {f} to {l}"),
            _ => String::new(),
        }
    )];
    let nodes: Vec<String> = table
        .partitions
        .iter()
        .map(|p| partition_name(device, p.number))
        .collect();
    let w = nodes.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
    out.push(format!(
        "{:<w$}  {:>12}  {:>12}  {:<36}  name",
        "node", "start", "size", "type"
    ));
    for (p, node) in table.partitions.iter().zip(&nodes) {
        let mut l = format!(
            "{node:<w$}  {:>12}  {:>12}  {:<36}  {}",
            p.start_sector,
            p.nr_sectors,
            p.type_.to_string(),
            p.name.as_deref().unwrap_or("")
        );
        if p.bootable {
            l.push_str(" (bootable)");
        }
        out.push(l.trim_end().to_string());
    }
    out.extend(table.warnings.iter().map(|w| format!("warning: {w}")));
    out
}
