"""What runs inside a container: doctor, clean, the site-packages ELF check, the config lint."""
