"""Reading failure output from many ranks: prefixes, timestamps, signature hits, the verdict."""
