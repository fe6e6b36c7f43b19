-- Version 15 changes nothing on this dialect (see the up file).
SELECT 1;
