"""Paper stage: the report in ``paper/`` rendered with numbers and figures from the database."""
