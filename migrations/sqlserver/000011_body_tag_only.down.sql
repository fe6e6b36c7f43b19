-- Version 11 changes nothing on this dialect (see the up file).
SELECT 1;
