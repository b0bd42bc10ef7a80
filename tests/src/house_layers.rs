//! The agent's layer order, as CONTRIBUTING.md draws it (`### Layers`): a table whose
//! rows run from the top layer down, each naming its top-level modules. A module may
//! import only from the layers below its own; modules of one layer are peers and import
//! nothing from each other. tests/tests/house.rs reads the table and checks every
//! top-level arrow of the agent's graph against it, so a crossing such as `report`
//! importing the server (`http`) or the detector importing `ingest` cannot come back.

use std::collections::{BTreeMap, BTreeSet};

use crate::house::ModPath;

/// Top-level module → its layer (0 is the bottom).
#[derive(Debug, Default)]
pub struct Layers {
    layer_of: BTreeMap<String, usize>,
    names: Vec<String>,
}

impl Layers {
    /// From the markdown of a `### Layers` section: `| name | `a`, `b` |` rows, top
    /// first, after the header and separator rows.
    pub fn parse(section: &str) -> Result<Layers, String> {
        let rows: Vec<&str> = section
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('|'))
            .skip(2)
            .collect();
        if rows.is_empty() {
            return Err("the layer table has no rows".into());
        }
        let mut layers = Layers::default();
        let count = rows.len();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let [name, modules, ..] = cells.as_slice() else {
                return Err(format!("a layer row needs a name and modules: {row}"));
            };
            let level = count - 1 - i;
            for module in modules.split('`').skip(1).step_by(2) {
                if let Some(old) = layers.layer_of.insert(module.to_string(), level) {
                    return Err(format!(
                        "`{module}` is in two layers ({} and {name})",
                        layers.names[count - 1 - old]
                    ));
                }
            }
            layers.names.push((*name).to_string());
        }
        Ok(layers)
    }

    fn name(&self, level: usize) -> &str {
        &self.names[self.names.len() - 1 - level]
    }

    /// Every way `top` (the crate's top-level modules) and `arrows` (lifted sibling
    /// arrows) break the table: a module in no layer, a layer naming no module, an
    /// arrow up or sideways.
    pub fn check(
        &self,
        top: &BTreeSet<String>,
        arrows: &BTreeSet<(ModPath, ModPath)>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for m in top.iter().filter(|m| !self.layer_of.contains_key(*m)) {
            problems.push(format!("module `{m}` is in no layer"));
        }
        for m in self.layer_of.keys().filter(|m| !top.contains(*m)) {
            problems.push(format!("the table names `{m}`, which is not a module"));
        }
        for (from, to) in arrows.iter().filter(|(f, t)| f.len() == 1 && t.len() == 1) {
            let (Some(&lf), Some(&lt)) = (self.layer_of.get(&from[0]), self.layer_of.get(&to[0]))
            else {
                continue;
            };
            if lt >= lf {
                let how = if lt == lf {
                    "its peer"
                } else {
                    "a layer above"
                };
                problems.push(format!(
                    "`{}` ({}) imports `{}` ({}), {how}",
                    from[0],
                    self.name(lf),
                    to[0],
                    self.name(lt)
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
| layer | modules |
|---|---|
| commands | `commands` |
| stages | `pipeline`, `report` |
| leaves | `clock`, `names` |
";

    fn arrows(pairs: &[(&str, &str)]) -> BTreeSet<(ModPath, ModPath)> {
        pairs
            .iter()
            .map(|(a, b)| (vec![a.to_string()], vec![b.to_string()]))
            .collect()
    }

    fn top(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn downward_arrows_pass_and_up_or_sideways_ones_fail() {
        let layers = Layers::parse(TABLE).unwrap();
        let all = top(&["commands", "pipeline", "report", "clock", "names"]);
        let down = arrows(&[("commands", "pipeline"), ("report", "clock")]);
        assert_eq!(layers.check(&all, &down), Vec::<String>::new());
        let bad = arrows(&[("clock", "pipeline"), ("report", "pipeline")]);
        assert_eq!(
            layers.check(&all, &bad),
            vec![
                "`clock` (leaves) imports `pipeline` (stages), a layer above",
                "`report` (stages) imports `pipeline` (stages), its peer",
            ]
        );
    }

    #[test]
    fn every_module_is_in_exactly_one_layer() {
        let layers = Layers::parse(TABLE).unwrap();
        let problems = layers.check(
            &top(&["commands", "pipeline", "report", "clock", "http"]),
            &arrows(&[]),
        );
        assert_eq!(
            problems,
            vec![
                "module `http` is in no layer",
                "the table names `names`, which is not a module"
            ]
        );
        let twice = format!("{TABLE}| again | `clock` |\n");
        assert!(
            Layers::parse(&twice)
                .unwrap_err()
                .contains("`clock` is in two layers")
        );
    }
}
