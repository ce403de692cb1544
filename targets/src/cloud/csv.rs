//! CSV as SkyPilot's catalog files write it (pandas' `to_csv`): fields
//! separated by `,`, quoted with `"` when they hold a `,`, a quote or a
//! line break, `""` for a quote inside. `GpuInfo` is such a field.
//!
//! Written by hand: the files need only this much of RFC 4180, and a
//! parser this small is checked byte for byte by its tests.

/// One record and the line it starts on (1-based).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub line: usize,
    pub fields: Vec<String>,
}

/// A malformed file: the line and what is wrong there.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CsvError {
    pub line: usize,
    pub message: String,
}

/// The most fields a record may have: catalogs have about 15 columns, and
/// a hostile file of commas must not become millions of strings.
const MAX_FIELDS: usize = 256;

/// Hands every record of `text` to `each`, in order, as it is read (one
/// record in memory at a time); blank lines are skipped. The first error,
/// the file's or `each`'s, ends the reading.
pub(super) fn each_record<E: From<CsvError>>(
    text: &str,
    mut each: impl FnMut(Record) -> Result<(), E>,
) -> Result<(), E> {
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        // Whether the current field was opened by a quote (and closed).
        let mut was_quoted = false;
        loop {
            let Some(c) = chars.next() else {
                if quoted {
                    return Err(CsvError {
                        line: start,
                        message: "a quoted field is not closed".to_owned(),
                    }
                    .into());
                }
                break;
            };
            if quoted {
                match c {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    '"' => {
                        quoted = false;
                        was_quoted = true;
                    }
                    '\n' => {
                        line += 1;
                        field.push('\n');
                    }
                    c => field.push(c),
                }
                continue;
            }
            match c {
                ',' => {
                    fields.push(std::mem::take(&mut field));
                    was_quoted = false;
                    if fields.len() >= MAX_FIELDS {
                        return Err(CsvError {
                            line,
                            message: format!("more than {MAX_FIELDS} fields in one record"),
                        }
                        .into());
                    }
                }
                '\r' if chars.peek() == Some(&'\n') => {}
                '\n' => {
                    line += 1;
                    break;
                }
                '"' if field.is_empty() && !was_quoted => quoted = true,
                _ if was_quoted => {
                    return Err(CsvError {
                        line,
                        message: "text after a closing quote".to_owned(),
                    }
                    .into());
                }
                '"' => {
                    return Err(CsvError {
                        line,
                        message: "a quote inside an unquoted field".to_owned(),
                    }
                    .into());
                }
                c => field.push(c),
            }
        }
        fields.push(field);
        if fields.len() == 1 && fields[0].is_empty() && !was_quoted {
            continue;
        }
        each(Record {
            line: start,
            fields,
        })?;
    }
    Ok(())
}

/// Every record of `text` (for tests: the catalog reads them one by one).
#[cfg(test)]
pub(super) fn records(text: &str) -> Result<Vec<Record>, CsvError> {
    let mut out = Vec::new();
    each_record(text, |r| {
        out.push(r);
        Ok::<(), CsvError>(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_only_commas_is_refused_early() {
        let text = ",".repeat(10_000);
        let err = records(&text).unwrap_err();
        assert_eq!(err.line, 1);
        assert!(
            err.message.contains("more than 256 fields"),
            "{}",
            err.message
        );
    }

    fn fields(text: &str) -> Vec<Vec<String>> {
        records(text)
            .unwrap()
            .into_iter()
            .map(|r| r.fields)
            .collect()
    }

    #[test]
    fn plain_and_quoted_fields() {
        assert_eq!(
            fields("a,b,,c\n1,\"x, y\",\"say \"\"hi\"\"\",\n"),
            vec![vec!["a", "b", "", "c"], vec!["1", "x, y", "say \"hi\"", ""],]
        );
        // pandas writes GpuInfo like this.
        let row = "g4dn.xlarge,T4,1.0,\"{'Gpus': [{'Name': 'T4', 'Count': 1}]}\",0.526";
        assert_eq!(fields(row)[0][3], "{'Gpus': [{'Name': 'T4', 'Count': 1}]}");
    }

    #[test]
    fn line_numbers_crlf_and_blank_lines() {
        let rs = records("h1,h2\r\n\r\na,\"multi\nline\"\nb,c").unwrap();
        assert_eq!(rs.len(), 3);
        assert_eq!(rs[1].line, 3);
        assert_eq!(rs[1].fields, vec!["a", "multi\nline"]);
        assert_eq!(rs[2].line, 5);
        assert_eq!(rs[0].fields, vec!["h1", "h2"]);
    }

    #[test]
    fn malformed_quotes_are_located() {
        assert_eq!(records("a\n\"open").unwrap_err().line, 2);
        assert_eq!(records("a\nb\"c").unwrap_err().line, 2);
        assert_eq!(records("\"x\"y").unwrap_err().line, 1);
    }
}
