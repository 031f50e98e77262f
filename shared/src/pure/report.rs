//! One-line reports of fatal errors.
//!
//! Many errors print their cause in their own message and return it from
//! `source()` as well, so a naive walk of the chain repeats it
//! (`...: client error (Connect): client error (Connect): ...`). [`one_line`]
//! joins the messages of a chain with `": "`, leaving out any message that the
//! text before it already carries.

/// The messages of an error chain (outermost first) as one line, without repeats.
/// Line breaks inside messages become spaces.
pub fn one_line<I, S>(messages: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut line = String::new();
    for message in messages {
        let message = message
            .as_ref()
            .split(['\n', '\r'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if message.is_empty() || line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn repeated_causes_are_left_out() {
        assert_eq!(
            one_line([
                "managing the webhook certificates",
                "ServiceError: client error (Connect)",
                "client error (Connect)",
                "tcp connect error: Connection refused (os error 111)",
                "Connection refused (os error 111)",
            ]),
            "managing the webhook certificates: ServiceError: client error (Connect): \
             tcp connect error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn distinct_causes_are_all_kept_on_one_line() {
        assert_eq!(
            one_line([
                "loading the serving certificate",
                "cannot read /x:\n  gone",
                ""
            ]),
            "loading the serving certificate: cannot read /x: gone"
        );
        assert_eq!(one_line(Vec::<String>::new()), "");
    }
}
