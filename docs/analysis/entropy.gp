# attn-analyze plot; redraw with: cd docs/analysis && gnuplot entropy.gp
set terminal svg size 1400,560 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'entropy.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,2 title 'Rows of every variant on the same inputs'
set key top left font ',8'
set ylabel 'fraction of rows'
set title 'normalised entropy H / log n_i'
set xlabel 'H / log n_i'
plot 'entropy_entropy_hist.csv' using (($1+$2)/2):3 with linespoints lc rgb '#1f77b4' dt 1 pt 2 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):4 with linespoints lc rgb '#d62728' dt 1 pt 3 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):5 with linespoints lc rgb '#2ca02c' dt 1 pt 4 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):6 with linespoints lc rgb '#ff7f0e' dt 1 pt 5 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):7 with linespoints lc rgb '#9467bd' dt 1 pt 6 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):8 with linespoints lc rgb '#8c564b' dt 1 pt 0 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):9 with linespoints lc rgb '#e377c2' dt 1 pt 1 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):10 with linespoints lc rgb '#17becf' dt 1 pt 2 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):11 with linespoints lc rgb '#7f7f7f' dt 1 pt 3 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):12 with linespoints lc rgb '#bcbd22' dt 1 pt 4 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):13 with linespoints lc rgb '#1f77b4' dt 2 pt 5 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):14 with linespoints lc rgb '#d62728' dt 2 pt 6 ps 0.6, 'entropy_entropy_hist.csv' using (($1+$2)/2):15 with linespoints lc rgb '#2ca02c' dt 2 pt 0 ps 0.6
set title 'sparsity S'
set xlabel 'S'
plot 'entropy_sparsity_hist.csv' using (($1+$2)/2):3 with linespoints lc rgb '#1f77b4' dt 1 pt 2 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):4 with linespoints lc rgb '#d62728' dt 1 pt 3 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):5 with linespoints lc rgb '#2ca02c' dt 1 pt 4 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):6 with linespoints lc rgb '#ff7f0e' dt 1 pt 5 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):7 with linespoints lc rgb '#9467bd' dt 1 pt 6 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):8 with linespoints lc rgb '#8c564b' dt 1 pt 0 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):9 with linespoints lc rgb '#e377c2' dt 1 pt 1 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):10 with linespoints lc rgb '#17becf' dt 1 pt 2 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):11 with linespoints lc rgb '#7f7f7f' dt 1 pt 3 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):12 with linespoints lc rgb '#bcbd22' dt 1 pt 4 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):13 with linespoints lc rgb '#1f77b4' dt 2 pt 5 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):14 with linespoints lc rgb '#d62728' dt 2 pt 6 ps 0.6, 'entropy_sparsity_hist.csv' using (($1+$2)/2):15 with linespoints lc rgb '#2ca02c' dt 2 pt 0 ps 0.6
unset multiplot
