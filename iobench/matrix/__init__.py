"""What the user asked for: the YAML matrix, its typed values, expansion, fio's option catalogue, units."""
