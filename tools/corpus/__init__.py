"""corpus: the Jane Austen training corpus (Debian's r-cran-janeaustenr), read without R."""
