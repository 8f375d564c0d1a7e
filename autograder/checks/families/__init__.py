"""Each notebook's declared input families (issue 29), as data: FAMILIES by exercise."""
